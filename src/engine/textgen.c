/* textgen.c — chat template + tokenizer + sampled generation for one sequence (textgen.h). */
#include "engine/textgen.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mapfile.h"
#include "text/stop_strings.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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
    tg->special = json_object();
    p = g4_path_join(dir, "tokenizer_config.json");
    /* INT_AS_REAL: HF writes model_max_length = 1e30 as an integer literal jansson cannot hold */
    json_error_t je;
    json_t *tc = NULL;
    if (g4_file_exists(p) && !(tc = json_load_file(p, JSON_DECODE_INT_AS_REAL, &je))) {
        rc = g4_err_set(err, G4_EFORMAT, "%s: malformed JSON at line %d: %s", p, je.line, je.text);
        free(p);
        g4_textgen_close(tg);
        return rc;
    }
    free(p);
    const char *key;
    json_t *v;
    if (json_is_object(tc))
        json_object_foreach(tc, key, v) {
            size_t kl = strlen(key);
            if (kl > 6 && strcmp(key + kl - 6, "_token") == 0 && json_is_string(v)) json_object_set(tg->special, key, v);
        }
    json_decref(tc);
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

int g4_textgen_generate(g4_textgen *tg, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p,
                        g4_text_cb cb, void *user, g4_gen_result *res, g4_err *err) {
    memset(res, 0, sizeof *res);
    g4_engine *e = tg->engine;
    const int64_t V = g4_engine_vocab(e), max_ctx = g4_engine_max_ctx(e);
    if (n_prompt == 0) return g4_err_set(err, G4_EINVAL, "the prompt is empty");
    int64_t max_new = p->max_new_tokens;
    if ((int64_t)n_prompt + max_new > max_ctx)
        return g4_err_set(err, G4_ECONTEXT, "the prompt (%zu tokens) plus %lld new tokens exceeds the context of %lld tokens",
                          n_prompt, (long long)max_new, (long long)max_ctx);
    g4_sampler *smp = NULL;
    g4_detok *dt = NULL;
    g4_stop_strings *ss = NULL;
    int rc = g4_sampler_create((int)V, &p->sampling, &smp, err);
    if (rc) return rc;
    if ((rc = g4_detok_create(tg->tok, p->skip_special, &dt, err))) goto out;
    if (p->n_stop_strings && (rc = g4_stop_strings_create(p->stop_strings, p->n_stop_strings, &ss, err))) goto out;
    int seq = -1;
    if ((rc = g4_engine_seq_open(e, (int64_t)n_prompt + (max_new > 0 ? max_new : 1), &seq, err))) goto out;
    const int mb = g4_engine_max_batch(e);
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)mb), *sq = malloc(sizeof(int32_t) * (size_t)mb);
    uint8_t *want = malloc((size_t)mb);
    res->ids = malloc(sizeof(int32_t) * (size_t)(max_new + 1));
    size_t cap = 0;
    res->prompt_tokens = n_prompt;
    res->finish_reason = "length";
    double t0 = now_s(), t_first = 0;
    if (!logits || !pos || !sq || !want || !res->ids) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto out2; }
    for (size_t s = 0; s < n_prompt; s += (size_t)mb) {
        int n = (int)(n_prompt - s < (size_t)mb ? n_prompt - s : (size_t)mb);
        for (int k = 0; k < n; k++) { pos[k] = (int32_t)(s + (size_t)k); sq[k] = seq; want[k] = s + (size_t)k == n_prompt - 1; }
        g4_batch b = {n, prompt + s, pos, sq, want};
        if ((rc = g4_engine_forward(e, &b, logits, err))) goto out2;
    }
    t_first = now_s();
    res->ttft_ms = (t_first - t0) * 1e3;
    for (int64_t step = 0; step < max_new; step++) {
        int32_t id = g4_sampler_sample(smp, logits, (int)V);
        if (id < 0) { rc = g4_err_set(err, G4_EINVAL, "no finite logit to sample from"); goto out2; }
        res->ids[res->n_ids++] = id;
        if (g4_gen_config_is_eos(&tg->gen, id)) { res->finish_reason = "stop"; break; }
        char *piece;
        size_t plen;
        if ((rc = g4_detok_push(dt, id, &piece, &plen, err))) goto out2;
        const char *emit = piece;
        size_t elen = plen;
        int stopped = 0;
        if (ss && (stopped = g4_stop_strings_feed(ss, piece, plen, &emit, &elen, err)) < 0) { free(piece); rc = -stopped; goto out2; }
        if (elen) {
            append(&res->text, &res->text_len, &cap, emit, elen);
            if (cb && cb(user, emit, elen)) { free(piece); res->finish_reason = "cancelled"; break; }
        }
        free(piece);
        if (stopped > 0) { res->finish_reason = "stop"; break; }
        if (step == max_new - 1) break;
        int32_t ps = (int32_t)(n_prompt + (size_t)step);
        uint8_t one = 1;
        g4_batch b = {1, &id, &ps, &seq, &one};
        if ((rc = g4_engine_forward(e, &b, logits, err))) goto out2;
    }
    if (strcmp(res->finish_reason, "cancelled") != 0 && !(ss && g4_stop_strings_matched(ss) >= 0)) {
        /* the detokenizer's held-back bytes, then the stop matcher's held-back text */
        char *rest = NULL;
        size_t rl = 0;
        if ((rc = g4_detok_flush(dt, &rest, &rl, err))) goto out2;
        const char *emit = rest;
        size_t elen = rl;
        int st = 0;
        if (ss && (st = g4_stop_strings_feed(ss, rest, rl, &emit, &elen, err)) < 0) { free(rest); rc = -st; goto out2; }
        if (elen) { append(&res->text, &res->text_len, &cap, emit, elen); if (cb) cb(user, emit, elen); }
        free(rest);
        if (st == 1) res->finish_reason = "stop";
        else if (ss && g4_stop_strings_finish(ss, &emit, &elen) == 0 && elen) {
            append(&res->text, &res->text_len, &cap, emit, elen);
            if (cb) cb(user, emit, elen);
        }
    }
    if (!res->text) append(&res->text, &res->text_len, &cap, "", 0);
    double dt_s = now_s() - t_first;
    res->decode_tok_s = res->n_ids > 1 && dt_s > 0 ? (double)(res->n_ids - 1) / dt_s : 0;
out2:
    free(logits); free(pos); free(sq); free(want);
    g4_engine_seq_close(e, seq);
out:
    g4_sampler_free(smp);
    g4_detok_free(dt);
    g4_stop_strings_free(ss);
    if (rc) g4_gen_result_free(res);
    return rc;
}

void g4_gen_result_free(g4_gen_result *r) {
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof *r);
}
