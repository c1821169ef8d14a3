/* cmd_run.c — `g4tp run`: one prompt in, the model's answer out. The prompt becomes a user turn
 * of the model's chat template (unless --raw), is tokenized, generated from (sampling defaults
 * from generation_config.json, overridable), and the answer is streamed to stdout as it is
 * decoded; the thinking (with --think) goes to stderr. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_images.h"
#include "engine/textgen.h"
#include "text/output_parser.h"

static const char *help =
    "usage: g4tp run [--model DIR] -p PROMPT [options]\n\n"
    "Answers one prompt with the model (default: the built-in demo model).\n"
    "  -p, --prompt TEXT       the user message (required)\n"
    "  --system TEXT           a system message first\n"
    "  --image FILE            an image the message shows (PNG, JPEG, WebP; repeatable; before the\n"
    "                          text; with --raw the prompt must hold one image placeholder per image)\n"
    "  --think                 enable thinking (printed to stderr)\n"
    "  --raw                   no chat template: the prompt text is tokenized as is\n"
    "  --max-new-tokens N      default 256\n"
    "  --stop TEXT             stop string (repeatable)\n"
    "  --json                  print one JSON object (response, reasoning, tool_calls, usage)\n"
    "%s%s";

int cmd_run(int argc, char **argv) {
    g4_engine_opts o = {0};
    o.threads = 1;
    const char *prompt = NULL, *system = NULL, *stops[16], *images[CLI_MAX_IMAGES];
    size_t n_stops = 0;
    int n_images = 0;
    int think = 0, raw = 0, bad = 0, json_out = 0;
    long long max_new = 256;
    cli_sampling smp;
    cli_sampling_init(&smp);
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { printf(help, cli_sampling_help, cli_engine_help); return 0; }
        if (cli_engine_flag(argc, argv, &i, &o, &bad) || cli_sampling_flag(argc, argv, &i, &smp, &bad)) continue;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(prompt = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--system")) { if (!(system = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--stop")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (n_stops == 16) { fprintf(stderr, "g4tp run: at most 16 --stop strings\n"); bad = 1; }
            else stops[n_stops++] = v;
        } else if (!strcmp(a, "--image")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (n_images == CLI_MAX_IMAGES) { fprintf(stderr, "g4tp run: at most %d images\n", CLI_MAX_IMAGES); bad = 1; }
            else images[n_images++] = v;
        } else if (!strcmp(a, "--think")) think = 1;
        else if (!strcmp(a, "--raw")) raw = 1;
        else if (!strcmp(a, "--json")) json_out = 1;
        else if (!strcmp(a, "--max-new-tokens")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 30, &max_new)) bad = 1; }
        else { fprintf(stderr, "g4tp run: unknown option %s (see --help)\n", a); bad = 1; }
    }
    if (bad) return 2;
    if (!prompt) { fprintf(stderr, "g4tp run: -p PROMPT is required (see --help)\n"); return 2; }
    if (!o.model_dir) o.model_dir = cli_default_model();
    g4_err err = {0};
    g4_engine *e;
    if (g4_engine_open(&o, &e, &err)) { cli_error("run", &err); return 1; }
    if (g4_engine_rank(e) != 0) {
        int rc = g4_engine_follow(e, &err);
        if (rc) cli_error("run", &err);
        g4_engine_close(e);
        return rc ? 1 : 0;
    }
    g4_textgen tg;
    int rc = 1;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n_ids = 0;
    g4_gen_result res = {0};
    cli_images ci = {0};
    if (g4_textgen_open(e, g4_engine_model_dir(e), &tg, &err)) { cli_error("run", &err); g4_engine_close(e); return 1; }
    if (raw) {
        text = strdup(prompt);
        len = strlen(prompt);
    } else {
        json_t *req = json_object(), *msgs = json_array();
        if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
        if (n_images) { /* the images first, then the text: the order the template renders them in */
            json_t *parts = json_array();
            for (int k = 0; k < n_images; k++) json_array_append_new(parts, json_pack("{s:s}", "type", "image"));
            json_array_append_new(parts, json_pack("{s:s,s:s}", "type", "text", "text", prompt));
            json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "user", "content", parts));
        } else {
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", prompt));
        }
        json_object_set_new(req, "messages", msgs);
        json_object_set_new(req, "add_generation_prompt", json_true());
        if (think) json_object_set_new(req, "enable_thinking", json_true());
        int r = g4_textgen_render(&tg, req, &text, &len, &err);
        json_decref(req);
        if (r) { cli_error("run", &err); goto out; }
    }
    if (g4_tokenizer_encode(tg.tok, text, len, 0, &ids, &n_ids, &err)) { cli_error("run", &err); goto out; }
    g4_gen_params gp = {0};
    for (int k = 0; k < n_images; k++)
        if (!cli_images_add(&ci, g4_engine_model_dir(e), images[k], "run")) goto out;
    if (!cli_images_attach(&ci, e, &ids, &n_ids, &gp, "run")) goto out;
    gp.max_new_tokens = max_new;
    g4_gen_config_sampling_defaults(&tg.gen, &gp.sampling);
    cli_sampling_apply(&smp, &gp.sampling);
    gp.stop_strings = stops;
    gp.n_stop_strings = n_stops;
    gp.skip_special = 0; /* keep the markers: the output parser splits thinking and tool calls */
    if (g4_textgen_generate(&tg, ids, n_ids, &gp, NULL, NULL, &res, &err)) { cli_error("run", &err); goto out; }
    g4_parsed_output po;
    g4_output_parse_opts popts = {0};
    if (g4_output_parse_ex(res.text, res.text_len, &popts, &po, &err)) { cli_error("run", &err); goto out; }
    if (json_out) {
        json_t *j = json_object(), *calls = json_array();
        /* lengths, not C strings: generated text may hold U+0000 */
        json_object_set_new(j, "response", json_stringn(po.content ? po.content : "", po.content ? po.content_len : 0));
        if (po.reasoning) json_object_set_new(j, "reasoning", json_stringn(po.reasoning, po.reasoning_len));
        for (size_t k = 0; k < po.n_calls; k++)
            json_array_append_new(calls, json_pack("{s:s,s:s}", "name", po.calls[k].name, "arguments", po.calls[k].arguments_json));
        json_object_set_new(j, "tool_calls", calls);
        json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)n_ids));
        json_object_set_new(j, "completion_tokens", json_integer((json_int_t)res.n_ids));
        json_object_set_new(j, "finish_reason", json_string(res.finish_reason));
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        if (po.reasoning && po.reasoning_len) {
            fputs("[thinking] ", stderr);
            fwrite(po.reasoning, 1, po.reasoning_len, stderr);
            fputc('\n', stderr);
        }
        for (size_t k = 0; k < po.n_calls; k++) printf("[tool call] %s %s\n", po.calls[k].name, po.calls[k].arguments_json);
        if (po.content) fwrite(po.content, 1, po.content_len, stdout);
        putchar('\n');
    }
    g4_parsed_output_free(&po);
    rc = 0;
out:
    cli_images_free(&ci);
    g4_gen_result_free(&res);
    free(text);
    free(ids);
    g4_textgen_close(&tg);
    g4_engine_close(e);
    return rc;
}
