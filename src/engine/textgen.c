/* textgen.c — chat template + tokenizer + sampled generation for one sequence (textgen.h). */
#include "engine/textgen.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mapfile.h"
#include "engine/scheduler.h"

int g4_textgen_open(g4_engine *e, const char *dir, g4_textgen *tg, g4_err *err) {
    memset(tg, 0, sizeof *tg);
    tg->engine = e;
    char *p = g4_path_join(dir, "tokenizer.json");
    int rc = g4_tokenizer_load(p, &tg->tok, err);
    free(p);
    if (rc) return rc;
    p = g4_path_join(dir, "chat_template.jinja");
    if (g4_file_exists(p)) {
        char *src;
        size_t len;
        rc = g4_read_file(p, &src, &len, err);
        if (!rc) {
            rc = g4_chat_template_load(src, len, &tg->tmpl, err);
            free(src);
            if (rc) g4_err_prefix(err, "%s: ", p);
        }
    }
    free(p);
    if (rc) { g4_textgen_close(tg); return rc; }
    if ((rc = g4_chat_template_special_tokens(dir, &tg->special, err))) { g4_textgen_close(tg); return rc; }
    if ((rc = g4_gen_config_load_dir(dir, &tg->gen, err))) { g4_textgen_close(tg); return rc; }
    return G4_OK;
}

void g4_textgen_close(g4_textgen *tg) {
    g4_tokenizer_free(tg->tok);
    g4_chat_template_free(tg->tmpl);
    json_decref(tg->special);
    memset(tg, 0, sizeof *tg);
}

int g4_textgen_render(const g4_textgen *tg, const json_t *request, char **text, size_t *len, g4_err *err) {
    if (!tg->tmpl) return g4_err_set(err, G4_ENOTFOUND, "the model has no chat_template.jinja");
    return g4_chat_template_render(tg->tmpl, request, tg->special, text, len, err);
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 256);
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return G4_ENOMEM;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return G4_OK;
}

/* One request through a private scheduler: the same token loop as the server's. */
int g4_textgen_generate(g4_textgen *tg, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p,
                        g4_text_cb cb, void *user, g4_gen_result *res, g4_err *err) {
    memset(res, 0, sizeof *res);
    g4_sched *s;
    int rc = g4_sched_create(tg, NULL, &s, err);
    if (rc) return rc;
    g4_sched_req *r;
    if ((rc = g4_sched_submit(s, prompt, n_prompt, p, &r, err))) { g4_sched_free(s); return rc; }
    size_t cap = 0;
    if (append(&res->text, &res->text_len, &cap, "", 0)) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    res->ids = malloc(sizeof(int32_t) * (size_t)(p->max_new_tokens + 1));
    if (!res->ids) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    int cancelled = 0;
    for (;;) {
        g4_sched_event ev;
        if (!g4_sched_next(r, &ev, -1)) continue;
        if (ev.kind == G4_EV_TEXT) {
            if (rc == G4_OK && append(&res->text, &res->text_len, &cap, ev.text, ev.len)) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
            if (!cancelled && cb && cb(user, ev.text, ev.len)) { cancelled = 1; g4_sched_cancel(r); }
            g4_sched_event_clear(&ev);
            continue;
        }
        if (ev.kind == G4_EV_ERROR) {
            if (rc == G4_OK) rc = g4_err_set(err, ev.code ? ev.code : G4_EINVAL, "%s", ev.text ? ev.text : "generation failed");
        } else {
            res->finish_reason = ev.finish_reason;
            res->prompt_tokens = ev.prompt_tokens;
            res->cached_tokens = ev.cached_tokens;
            res->n_ids = ev.completion_tokens;
            res->ttft_ms = ev.ttft_ms;
            res->decode_tok_s = ev.tokens_per_s;
        }
        g4_sched_event_clear(&ev);
        break;
    }
    /* the generated ids, as the scheduler recorded them */
    if (rc == G4_OK) g4_sched_req_ids(r, res->ids, (size_t)p->max_new_tokens + 1, &res->n_ids);
    g4_sched_req_free(r);
    g4_sched_free(s);
    if (rc) g4_gen_result_free(res);
    return rc;
}

void g4_gen_result_free(g4_gen_result *r) {
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof *r);
}
