/* main.c — the g4tp command: dispatches to the subcommands (cmd_*.c). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tp/comm.h"

/* Under mpirun the launcher ends a job (a rank died, or it was signalled itself) by SIGCONT,
 * then SIGTERM, then SIGKILL, odls_base_sigkill_timeout (1 s) apart: from its first signal on, a
 * peer that stops answering has failed (comm_mpi.c), so the survivors report it instead of
 * being killed in a collective. SIGTERM ends the process a second later rather than at once,
 * which leaves that report time to come out. (g4tp serve takes SIGTERM itself: a drain.) */
static void on_launcher_signal(int sig) {
    g4_comm_mpi_ending();
    if (sig == SIGTERM) alarm(1);
}

static void on_alarm(int sig) {
    (void)sig;
    signal(SIGTERM, SIG_DFL);
    raise(SIGTERM);
}

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
    if (g4_comm_mpi_launched()) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_launcher_signal;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGCONT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGALRM, on_alarm);
    }
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "g4tp: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return 2;
}
