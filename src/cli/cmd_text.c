/* cmd_text.c — the text tools that need no weights: `g4tp tokenize`, `g4tp detokenize` and
 * `g4tp render` (the model folder's tokenizer.json and chat_template.jinja only). */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "cli.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

/* All of stdin (binary-safe). */
static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) b = realloc(b, cap *= 2);
        size_t got = fread(b + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) break;
    }
    b[n] = 0;
    *len = n;
    return b;
}

static int load_tok(const char *model, g4_tokenizer **tok) {
    char *p = g4_path_join(model, "tokenizer.json");
    g4_err err = {0};
    int rc = g4_tokenizer_load(p, tok, &err);
    free(p);
    if (rc) cli_error("tokenize", &err);
    return rc;
}

static void print_ids(const int32_t *ids, size_t n, int json) {
    if (json) putchar('[');
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? (json ? "," : " ") : "", ids[i]);
    printf(json ? "]\n" : "\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    int json = 0, jsonl = 0, add_special = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: g4tp tokenize [--model DIR] [--json | --jsonl] [--add-special] < text\n\n"
                   "Reads text on stdin (bytes as they are, no newline stripped) and prints its token ids,\n"
                   "space-separated. --json: one JSON array. --jsonl: each input line is a JSON string;\n"
                   "each output line the JSON array of its ids. --add-special: apply the tokenizer's\n"
                   "post-processor (a chat-template prompt already has its <bos>: leave it off).\n");
            return 0;
        }
        if (!strcmp(a, "--model")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--add-special")) add_special = 1;
        else { fprintf(stderr, "g4tp tokenize: unknown option %s (see --help)\n", a); return 2; }
    }
    if (!model) model = cli_default_model();
    g4_tokenizer *tok;
    if (load_tok(model, &tok)) return 1;
    size_t len;
    char *in = read_stdin(&len);
    g4_err err = {0};
    int rc = 0;
    if (jsonl) {
        char *line = in, *end = in + len;
        int lineno = 0;
        while (line < end) {
            char *nl = memchr(line, '\n', (size_t)(end - line));
            size_t ll = nl ? (size_t)(nl - line) : (size_t)(end - line);
            lineno++;
            if (ll > 0) {
                json_error_t je;
                json_t *s = json_loadb(line, ll, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
                if (!json_is_string(s)) {
                    fprintf(stderr, "g4tp tokenize: line %d is not a JSON string\n", lineno);
                    json_decref(s);
                    rc = 1;
                    break;
                }
                int32_t *ids;
                size_t n;
                if (g4_tokenizer_encode(tok, json_string_value(s), json_string_length(s), add_special, &ids, &n, &err)) {
                    fprintf(stderr, "g4tp tokenize: line %d: %s\n", lineno, err.msg);
                    json_decref(s);
                    rc = 1;
                    break;
                }
                print_ids(ids, n, 1);
                free(ids);
                json_decref(s);
            }
            line += ll + 1;
        }
    } else {
        int32_t *ids;
        size_t n;
        if (g4_tokenizer_encode(tok, in, len, add_special, &ids, &n, &err)) { cli_error("tokenize", &err); rc = 1; }
        else { print_ids(ids, n, json); free(ids); }
    }
    free(in);
    g4_tokenizer_free(tok);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: g4tp detokenize [--model DIR] [--skip-special] < ids\n\n"
                   "Reads token ids on stdin (a JSON array, or numbers separated by spaces, commas or\n"
                   "newlines) and writes their text to stdout exactly, nothing added.\n");
            return 0;
        }
        if (!strcmp(a, "--model")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--skip-special")) skip = 1;
        else { fprintf(stderr, "g4tp detokenize: unknown option %s (see --help)\n", a); return 2; }
    }
    if (!model) model = cli_default_model();
    g4_tokenizer *tok;
    if (load_tok(model, &tok)) return 1;
    size_t len, n = 0, cap = 64;
    char *in = read_stdin(&len);
    int32_t *ids = malloc(sizeof *ids * cap);
    int rc = 0;
    for (char *p = in; *p && !rc;) {
        if (strchr(" \t\r\n,[]", *p)) { p++; continue; }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= g4_tokenizer_vocab_size(tok)) {
            fprintf(stderr, "g4tp detokenize: \"%.20s\" is not a token id of this vocabulary (0..%d)\n", p, g4_tokenizer_vocab_size(tok) - 1);
            rc = 1;
            break;
        }
        if (n == cap) ids = realloc(ids, sizeof *ids * (cap *= 2));
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (!rc) {
        char *text;
        size_t tl;
        g4_err err = {0};
        if (g4_tokenizer_decode(tok, ids, n, skip, &text, &tl, &err)) { cli_error("detokenize", &err); rc = 1; }
        else { fwrite(text, 1, tl, stdout); free(text); }
    }
    free(ids);
    free(in);
    g4_tokenizer_free(tok);
    return rc;
}

int cmd_render(int argc, char **argv) {
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: g4tp render [--model DIR] < request.json\n\n"
                   "Reads a chat request (the OpenAI body: messages, tools, plus add_generation_prompt and\n"
                   "enable_thinking) on stdin and writes the prompt the model's chat_template.jinja renders,\n"
                   "exactly, nothing added.\n");
            return 0;
        }
        if (!strcmp(a, "--model")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else { fprintf(stderr, "g4tp render: unknown option %s (see --help)\n", a); return 2; }
    }
    if (!model) model = cli_default_model();
    g4_err err = {0};
    char *p = g4_path_join(model, "chat_template.jinja"), *src = NULL;
    size_t sl;
    if (g4_read_file(p, &src, &sl, &err)) { free(p); cli_error("render", &err); return 1; }
    free(p);
    g4_chat_template *t;
    if (g4_chat_template_load(src, sl, &t, &err)) { free(src); cli_error("render", &err); return 1; }
    free(src);
    json_t *special;
    if (g4_chat_template_special_tokens(model, &special, &err)) { g4_chat_template_free(t); cli_error("render", &err); return 1; }
    size_t len;
    char *in = read_stdin(&len);
    json_error_t je;
    json_t *req = json_loadb(in, len, JSON_REJECT_DUPLICATES, &je);
    free(in);
    int rc = 0;
    if (!req) { fprintf(stderr, "g4tp render: malformed JSON at line %d: %s\n", je.line, je.text); rc = 1; }
    else {
        char *out;
        size_t ol;
        if (g4_chat_template_render(t, req, special, &out, &ol, &err)) { cli_error("render", &err); rc = 1; }
        else { fwrite(out, 1, ol, stdout); free(out); }
    }
    json_decref(req);
    json_decref(special);
    g4_chat_template_free(t);
    return rc;
}
