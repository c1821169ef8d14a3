/* cmd_chat.c — `g4tp chat`: an interactive multi-turn conversation. Each user line is added to
 * the history, the whole conversation is rendered with the chat template, and the answer is
 * streamed to stdout as it is decoded (thinking, with --think, to stderr). The engine's prefix
 * cache keeps the conversation's KV between turns, so a turn computes only what it adds (the
 * new user message, and what the template renders differently from what was generated).
 * Commands: /image FILE shows the next message an image, /reset clears the history, /exit (or
 * end of input) quits. Images stay in the history (each turn renders them again; their KV comes
 * from the prefix cache, found by their pixels). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_images.h"
#include "engine/textgen.h"
#include "text/output_parser.h"

static const char *help =
    "usage: g4tp chat [--model DIR] [options]\n\n"
    "Interactive chat: type a message, the answer streams back. /image FILE attaches an image to\n"
    "the next message (PNG, JPEG, WebP; repeat for several), /reset clears the history,\n"
    "/exit or end of input quits. Lines from a pipe work too (one user turn per line). Each turn\n"
    "computes only the tokens it adds: the conversation so far comes from the prefix cache\n"
    "(--no-prefix-cache recomputes it every turn).\n"
    "  --system TEXT           a system message first\n"
    "  --think                 enable thinking (streamed to stderr)\n"
    "  --max-new-tokens N      per answer (default 512)\n"
    "  --stats                 after each answer, print to stderr the prompt tokens, how many came\n"
    "                          from the cache, and the time to the first token\n"
    "%s%s";

typedef struct { g4_output_stream *ps; } stream_ctx;

static void print_events(const g4_out_event *ev, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind == G4_OUT_CONTENT) fwrite(ev[i].text, 1, ev[i].len, stdout);
        else if (ev[i].kind == G4_OUT_REASONING) fwrite(ev[i].text, 1, ev[i].len, stderr);
        else if (ev[i].kind == G4_OUT_TOOL_CALL && ev[i].call) printf("\n[tool call] %s %s\n", ev[i].call->name, ev[i].call->arguments_json);
    }
    fflush(stdout);
    fflush(stderr);
}

static int on_text(void *user, const char *text, size_t len) {
    stream_ctx *c = user;
    const g4_out_event *ev;
    size_t n;
    g4_err err;
    if (g4_output_stream_feed(c->ps, text, len, &ev, &n, &err) == G4_OK) print_events(ev, n);
    return 0;
}

/* A turn that failed takes its images back with its message. */
static void drop_last(cli_images *ci, int k) {
    while (k-- > 0 && ci->n > 0) g4_image_patches_free(&ci->pp[--ci->n]);
}

int cmd_chat(int argc, char **argv) {
    g4_engine_opts o = {0};
    o.threads = 1;
    const char *system = NULL;
    int think = 0, bad = 0, stats = 0;
    long long max_new = 512;
    cli_sampling smp;
    cli_sampling_init(&smp);
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { printf(help, cli_sampling_help, cli_engine_help); return 0; }
        if (cli_engine_flag(argc, argv, &i, &o, &bad) || cli_sampling_flag(argc, argv, &i, &smp, &bad)) continue;
        if (!strcmp(a, "--system")) { if (!(system = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--think")) think = 1;
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--max-new-tokens")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 30, &max_new)) bad = 1; }
        else { fprintf(stderr, "g4tp chat: unknown option %s (see --help)\n", a); bad = 1; }
    }
    if (bad) return 2;
    if (!o.model_dir) o.model_dir = cli_default_model();
    g4_err err = {0};
    g4_engine *e;
    if (g4_engine_open(&o, &e, &err)) { cli_error("chat", &err); return 1; }
    if (g4_engine_rank(e) != 0) {
        int rc = g4_engine_follow(e, &err);
        g4_engine_close(e);
        return rc ? 1 : 0;
    }
    g4_textgen tg;
    if (g4_textgen_open(e, g4_engine_model_dir(e), &tg, &err)) { cli_error("chat", &err); g4_engine_close(e); return 1; }
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
    int tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    int rc = 0, pending = 0; /* images attached to the next message: the last `pending` of ci */
    cli_images ci = {0};
    for (;;) {
        if (tty) { fputs("> ", stderr); fflush(stderr); }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strncmp(line, "/image ", 7)) {
            const char *f = line + 7;
            while (*f == ' ') f++;
            if (cli_images_add(&ci, g4_engine_model_dir(e), f, "chat")) {
                pending++;
                if (tty) fprintf(stderr, "[image %s attached to the next message]\n", f);
            }
            continue;
        }
        if (!strcmp(line, "/reset")) {
            cli_images_free(&ci);
            pending = 0;
            json_array_clear(msgs);
            if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
            continue;
        }
        json_t *user = json_pack("{s:s,s:s%}", "role", "user", "content", line, (size_t)n);
        if (!user) { fprintf(stderr, "g4tp chat: the line is not valid UTF-8\n"); continue; }
        if (pending) { /* the images first, then the text */
            json_t *parts = json_array();
            for (int k = 0; k < pending; k++) json_array_append_new(parts, json_pack("{s:s}", "type", "image"));
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(user, "content")));
            json_object_set_new(user, "content", parts);
        }
        json_array_append_new(msgs, user);
        json_t *req = json_pack("{s:O,s:b,s:b}", "messages", msgs, "add_generation_prompt", 1, "enable_thinking", think);
        char *text = NULL;
        size_t len;
        int32_t *ids = NULL;
        size_t n_ids;
        int r = g4_textgen_render(&tg, req, &text, &len, &err);
        json_decref(req);
        if (!r) r = g4_tokenizer_encode(tg.tok, text, len, 0, &ids, &n_ids, &err);
        free(text);
        g4_gen_params gp = {.max_new_tokens = max_new, .skip_special = 0};
        if (!r && !cli_images_attach(&ci, e, &ids, &n_ids, &gp, "chat")) r = G4_EINVAL, err.code = 0; /* printed */
        if (r) {
            if (err.code) cli_error("chat", &err);
            json_array_remove(msgs, json_array_size(msgs) - 1);
            drop_last(&ci, pending);
            pending = 0;
            free(ids);
            continue;
        }
        g4_gen_config_sampling_defaults(&tg.gen, &gp.sampling);
        cli_sampling_apply(&smp, &gp.sampling);
        if ((int64_t)n_ids + gp.max_new_tokens > g4_engine_max_ctx(e)) gp.max_new_tokens = g4_engine_max_ctx(e) - (int64_t)n_ids;
        stream_ctx sc = {0};
        g4_output_parse_opts popts = {0};
        g4_gen_result res;
        if (gp.max_new_tokens < 1) {
            fprintf(stderr, "g4tp chat: the conversation fills the context (%lld tokens); /reset to start over\n", (long long)g4_engine_max_ctx(e));
            json_array_remove(msgs, json_array_size(msgs) - 1);
            drop_last(&ci, pending);
            pending = 0;
            free(ids);
            continue;
        }
        g4_output_stream_create(&popts, &sc.ps, &err);
        r = g4_textgen_generate(&tg, ids, n_ids, &gp, on_text, &sc, &res, &err);
        free(ids);
        if (r) {
            cli_error("chat", &err);
            g4_output_stream_free(sc.ps);
            json_array_remove(msgs, json_array_size(msgs) - 1);
            drop_last(&ci, pending);
            pending = 0;
            continue;
        }
        pending = 0;
        const g4_out_event *ev;
        size_t nev;
        if (g4_output_stream_finish(sc.ps, &ev, &nev, &err) == G4_OK) print_events(ev, nev);
        putchar('\n');
        fflush(stdout);
        if (stats)
            fprintf(stderr, "[prompt %zu tokens, %zu from the cache, first token after %.0f ms]\n", res.prompt_tokens, res.cached_tokens,
                    res.ttft_ms);
        g4_parsed_output po;
        if (g4_output_stream_take(sc.ps, &po, &err) == G4_OK) {
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", po.content ? po.content : ""));
            g4_parsed_output_free(&po);
        }
        g4_output_stream_free(sc.ps);
        g4_gen_result_free(&res);
    }
    free(line);
    cli_images_free(&ci);
    json_decref(msgs);
    g4_textgen_close(&tg);
    g4_engine_close(e);
    return rc;
}
