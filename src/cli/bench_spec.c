/* bench_spec.c — step-cost curve and served decode with and without drafts (bench_spec.h). */
#include "bench_spec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/scheduler.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_step_curve(g4_engine *e, const int32_t *prompt, int plen, int max_t, int reps, double *sec, g4_err *err) {
    const int mb = g4_engine_max_batch(e);
    const int64_t V = g4_engine_vocab(e);
    if (max_t > mb) max_t = mb;
    int seq, rc;
    const int64_t cap = (int64_t)plen + (int64_t)reps * max_t * (max_t + 1) / 2 + 1;
    if ((rc = g4_engine_seq_open(e, cap, &seq, err))) return rc;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)mb), *pos = malloc(sizeof(int32_t) * (size_t)mb), *sq = malloc(sizeof(int32_t) * (size_t)mb);
    uint8_t *want = malloc((size_t)mb);
    float *lg = malloc(sizeof(float) * (size_t)V * (size_t)max_t);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!ids || !pos || !sq || !want || !lg || !t) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto out; }
    int64_t len = 0;
    for (int s0 = 0; s0 < plen && !rc; s0 += mb) {
        const int n = plen - s0 < mb ? plen - s0 : mb;
        for (int i = 0; i < n; i++) { pos[i] = s0 + i; sq[i] = seq; want[i] = s0 + i == plen - 1; }
        g4_batch b = {.n = n, .ids = prompt + s0, .pos = pos, .seq = sq, .logits = want};
        rc = g4_engine_forward(e, &b, lg, err);
        len += n;
    }
    /* a verification step: t tokens of one sequence, every one with its logits */
    for (int T = 1; T <= max_t && !rc; T++) {
        for (int r = 0; r < reps && !rc; r++) {
            for (int i = 0; i < T; i++) { ids[i] = prompt[(len + i) % plen]; pos[i] = (int32_t)(len + i); sq[i] = seq; want[i] = 1; }
            g4_batch b = {.n = T, .ids = ids, .pos = pos, .seq = sq, .logits = want};
            const double t0 = now_s();
            rc = g4_engine_forward(e, &b, lg, err);
            t[r] = now_s() - t0;
            len += T;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        sec[T] = t[reps / 2];
    }
out:
    g4_engine_seq_close(e, seq);
    free(ids); free(pos); free(sq); free(want); free(lg); free(t);
    return rc;
}

int bench_served_run(g4_engine *e, const int32_t *prompt, int plen, int gen, int streams, int spec, bench_served *out, g4_err *err) {
    memset(out, 0, sizeof *out);
    out->streams = streams;
    out->spec = spec;
    g4_textgen tg = {.engine = e}; /* ids only: no tokenizer, no text events */
    g4_sched *s;
    int rc = g4_sched_create(&tg, NULL, &s, err);
    if (rc) return rc;
    g4_sched_req **r = calloc((size_t)streams, sizeof *r);
    int32_t *p = malloc(sizeof(int32_t) * (size_t)plen);
    const int64_t V = g4_engine_vocab(e);
    if (!r || !p) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < streams && !rc; i++) {
        memcpy(p, prompt, sizeof(int32_t) * (size_t)plen);
        p[plen - 1] = (int32_t)(3 + (p[plen - 1] + 7 * i) % (V - 3));
        g4_gen_params gp = {.max_new_tokens = gen, .ignore_eos = 1, .speculative = spec ? 0 : -1};
        g4_sampling_params_default(&gp.sampling);
        rc = g4_sched_submit(s, p, (size_t)plen, &gp, &r[i], err);
    }
    /* the decode phase: from when every stream has its first token to when all are done */
    g4_sched_stats a, b;
    double t0 = 0;
    for (int have = 0; !rc && !have;) {
        have = 1;
        for (int i = 0; i < streams; i++) {
            int32_t id;
            size_t n;
            g4_sched_req_ids(r[i], &id, 1, &n);
            have &= n >= 1;
            g4_sched_event ev; /* before its first token a stream can only fail */
            if (n == 0 && g4_sched_next(r[i], &ev, 0)) {
                rc = g4_err_set(err, ev.code ? ev.code : G4_EINVAL, "%s", ev.text ? ev.text : "generation failed");
                g4_sched_event_clear(&ev);
                break;
            }
        }
        if (rc) break;
        if (have) { g4_sched_get_stats(s, &a); t0 = now_s(); }
        else { struct timespec ts = {0, 200000}; nanosleep(&ts, NULL); }
    }
    for (int i = 0; i < streams && !rc; i++) {
        for (;;) {
            g4_sched_event ev;
            if (!g4_sched_next(r[i], &ev, -1)) continue;
            const int k = ev.kind;
            if (k == G4_EV_ERROR) rc = g4_err_set(err, ev.code ? ev.code : G4_EINVAL, "%s", ev.text ? ev.text : "generation failed");
            g4_sched_event_clear(&ev);
            if (k != G4_EV_TEXT) break;
        }
    }
    const double t1 = now_s();
    if (!rc) {
        g4_sched_get_stats(s, &b);
        const uint64_t toks = b.generated_tokens - a.generated_tokens;
        out->steps = b.steps - a.steps;
        out->decode_tok_s = t1 > t0 ? (double)toks / (t1 - t0) : 0;
        out->tokens_per_step = out->steps ? (double)toks / (double)out->steps : 0;
        out->proposed = b.draft_proposed - a.draft_proposed;
        out->accepted = b.draft_accepted - a.draft_accepted;
        out->spec_steps = b.spec_steps - a.spec_steps;
    }
done:
    for (int i = 0; r && i < streams; i++) g4_sched_req_free(r[i]);
    free(r);
    free(p);
    g4_sched_free(s);
    return rc;
}
