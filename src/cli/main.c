/* main.c — the g4tp command: dispatches to the subcommands (cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct { const char *name; int (*fn)(int, char **); const char *what; } commands[] = {
    {"run", cmd_run, "answer one prompt through the chat template (text in, text out)"},
    {"generate", cmd_generate, "greedy generation from token ids (prints the generated ids)"},
    {"chat", cmd_chat, "interactive multi-turn chat, streaming the answers"},
    {"tokenize", cmd_tokenize, "text on stdin -> token ids"},
    {"detokenize", cmd_detokenize, "token ids on stdin -> text"},
    {"render", cmd_render, "chat request (JSON) on stdin -> the rendered prompt"},
    {"bench", cmd_bench, "prefill/decode speed against this machine's bandwidth and FMA limits"},
    {"inspect", cmd_inspect, "config summary, parameters and bytes per component and per rank"},
    {"shard", cmd_shard, "compile a Hugging Face checkpoint into per-rank artifacts (mapped at load)"},
    {"synth", cmd_synth, "write a random-weight checkpoint shaped like a config (tests, benchmarks)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching (see docs/server.md)"},
};

static void usage(FILE *f) {
    fprintf(f, "g4tp — tensor-parallel inference engine for Gemma-4 (dense, 31B)\n\n"
               "usage: g4tp COMMAND [options]   (g4tp COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "g4tp: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return 2;
}
