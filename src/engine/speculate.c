/* speculate.c — drafter spec, prompt lookup, acceptance estimates, step costs and the policy
 * (speculate.h). */
#include "engine/speculate.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- spec ---------------------------------------------------------------------------------- */

static int parse_int(const char *s, size_t len, int lo, int hi, const char *what, const char *all, int *out, g4_err *err) {
    char buf[32];
    if (len == 0 || len >= sizeof buf) return g4_err_set(err, G4_EINVAL, "--speculative \"%s\": %s must be an integer in [%d, %d]", all, what, lo, hi);
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || *end || end == buf || v < lo || v > hi)
        return g4_err_set(err, G4_EINVAL, "--speculative \"%s\": %s must be an integer in [%d, %d] (got \"%s\")", all, what, lo, hi, buf);
    *out = (int)v;
    return G4_OK;
}

int g4_spec_parse(const char *s, g4_spec_cfg *c, g4_err *err) {
    memset(c, 0, sizeof *c);
    if (!s || !*s) return G4_OK;
    if (!strcmp(s, "ngram") || !strncmp(s, "ngram:", 6)) {
        c->method = G4_SPEC_NGRAM;
        c->n = 3;
        c->k = 4;
        if (!s[5]) return G4_OK;
        const char *a = s + 6, *comma = strchr(a, ',');
        if (!comma) return g4_err_set(err, G4_EINVAL, "--speculative \"%s\": expected ngram:N,K (N the longest n-gram matched, K the drafts per round)", s);
        int rc = parse_int(a, (size_t)(comma - a), 1, 16, "N", s, &c->n, err);
        return rc ? rc : parse_int(comma + 1, strlen(comma + 1), 1, G4_SPEC_MAX_K, "K", s, &c->k, err);
    }
    if (!strncmp(s, "mtp:", 4)) {
        c->method = G4_SPEC_MTP;
        c->k = 4;
        const char *d = s + 4, *colon = strrchr(d, ':');
        size_t dl = strlen(d);
        int digits = colon && colon[1];
        for (const char *p = colon ? colon + 1 : ""; *p && digits; p++) digits = isdigit((unsigned char)*p) || *p == '-' || *p == '+';
        if (digits) {
            int rc = parse_int(colon + 1, strlen(colon + 1), 1, G4_SPEC_MAX_K, "K", s, &c->k, err);
            if (rc) return rc;
            dl = (size_t)(colon - d);
        }
        if (dl == 0) return g4_err_set(err, G4_EINVAL, "--speculative \"%s\": expected mtp:DIR[:K] (DIR an assistant checkpoint folder)", s);
        if (dl >= sizeof c->dir) return g4_err_set(err, G4_EINVAL, "--speculative: the assistant folder name is too long");
        memcpy(c->dir, d, dl);
        c->dir[dl] = 0;
        return G4_OK;
    }
    return g4_err_set(err, G4_EINVAL, "--speculative \"%s\": expected ngram[:N,K] or mtp:DIR[:K]", s);
}

int64_t g4_spec_keep(const g4_spec_cfg *c, int asst_window, int target_window) {
    if (c->method == G4_SPEC_NONE) return 0;
    int64_t keep = c->k;
    /* a draft at q reads rows q-W_a-1..q-1; the target keeps q-W_t+1.. for its own next query */
    if (c->method == G4_SPEC_MTP && target_window > 0 && asst_window + 2 - target_window > 0) keep += asst_window + 2 - target_window;
    return keep;
}

/* ---- prompt lookup ------------------------------------------------------------------------- */

int g4_spec_ngram(const int32_t *t, int64_t len, int n, int k, int32_t *out) {
    for (int m = (int64_t)n < len - 1 ? n : (int)(len - 1); m >= 1; m--) {
        const int32_t *suf = t + len - m;
        for (int64_t i = len - m - 1; i >= 0; i--) {
            if (t[i] != suf[0] || memcmp(t + i, suf, sizeof(int32_t) * (size_t)m)) continue;
            const int64_t p = len - m - i; /* the period of the repeat */
            int j = 0;
            for (; j < k; j++) {
                out[j] = len + j - p < len ? t[len + j - p] : out[j - p];
                if (out[j] < 0) break; /* an image's token (g4_batch): not a token to propose */
            }
            if (j > 0) return j;
        }
    }
    return 0;
}

/* ---- acceptance -------------------------------------------------------------------------------- */

void g4_spec_stat_init(g4_spec_stat *s) { s->succ = s->trials = 0; }

double g4_spec_rate(const g4_spec_stat *s) { return (s->succ + 1.0) / (s->trials + 2.0); }

void g4_spec_stat_update(g4_spec_stat *s, int proposed, int accepted) {
    if (proposed <= 0) return;
    s->succ = 0.9 * s->succ + accepted;
    s->trials = 0.9 * s->trials + accepted + (accepted < proposed ? 1 : 0);
}

void g4_spec_stat_idle(g4_spec_stat *s) {
    s->succ *= 0.98;
    s->trials *= 0.98;
}

void g4_spec_stat_seed(g4_spec_stat *dst, const g4_spec_stat *all) {
    const double w = all->trials > 4 ? 4 / all->trials : 1;
    dst->succ = all->succ * w;
    dst->trials = all->trials * w;
}

double g4_spec_expected(double a, int m) {
    double e = 1, p = 1;
    for (int i = 0; i < m; i++) e += (p *= a);
    return e;
}

/* ---- costs ------------------------------------------------------------------------------------- */

int g4_spec_costs_init(g4_spec_costs *c, int max_tokens, int max_seqs, g4_err *err) {
    c->max_tokens = max_tokens;
    c->max_seqs = max_seqs;
    c->step = calloc((size_t)max_tokens + 1, sizeof *c->step);
    c->draft = calloc((size_t)max_seqs + 1, sizeof *c->draft);
    if (!c->step || !c->draft) {
        g4_spec_costs_free(c);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    return G4_OK;
}

void g4_spec_costs_free(g4_spec_costs *c) {
    free(c->step);
    free(c->draft);
    c->step = c->draft = NULL;
}

static void ema(double *slot, double x) { *slot = *slot > 0 ? 0.8 * *slot + 0.2 * x : x; }

void g4_spec_costs_add(g4_spec_costs *c, int tokens, double seconds) {
    if (tokens >= 1 && tokens <= c->max_tokens && seconds > 0) ema(&c->step[tokens], seconds);
}

void g4_spec_costs_add_draft(g4_spec_costs *c, int seqs, int steps, double seconds) {
    if (seqs >= 1 && seqs <= c->max_seqs && steps >= 1 && seconds > 0) ema(&c->draft[seqs], seconds / steps);
}

/* v[x] from the measured entries of v[1..n]: linear between neighbours, flat past the ends. */
static double lookup(const double *v, int n, int x, double none) {
    if (x < 1) x = 1;
    if (x > n) x = n;
    if (v[x] > 0) return v[x];
    int lo = x - 1, hi = x + 1;
    while (lo >= 1 && !(v[lo] > 0)) lo--;
    while (hi <= n && !(v[hi] > 0)) hi++;
    if (lo >= 1 && hi <= n) return v[lo] + (v[hi] - v[lo]) * (double)(x - lo) / (double)(hi - lo);
    if (lo >= 1) return v[lo];
    if (hi <= n) return v[hi];
    return none;
}

double g4_spec_cost(const g4_spec_costs *c, int tokens) { return lookup(c->step, c->max_tokens, tokens, 1.0); }
double g4_spec_draft_cost(const g4_spec_costs *c, int seqs) { return lookup(c->draft, c->max_seqs, seqs, 0.0); }

/* ---- policy ------------------------------------------------------------------------------------ */

int g4_spec_choose(const g4_spec_costs *c, int base_tokens, int decoding, int n, const double *rate, const int *avail, int room,
                   int draft, int *take) {
    int order[n > 0 ? n : 1], maxm = 0;
    for (int i = 0; i < n; i++) {
        take[i] = 0;
        if (avail[i] > maxm) maxm = avail[i];
        int j = i; /* insertion by rate, ties by index */
        while (j > 0 && rate[order[j - 1]] < rate[i]) { order[j] = order[j - 1]; j--; }
        order[j] = i;
    }
    double best = decoding / g4_spec_cost(c, base_tokens);
    int best_j = 0, best_m = 0;
    for (int m = 1; m <= maxm; m++) {
        int extra = 0;
        double gain = 0;
        for (int j = 1; j <= n; j++) {
            const int i = order[j - 1], mi = avail[i] < m ? avail[i] : m;
            if (extra + mi > room) break;
            extra += mi;
            gain += g4_spec_expected(rate[i], mi) - 1;
            const double t = g4_spec_cost(c, base_tokens + extra) + (draft ? m * g4_spec_draft_cost(c, j) : 0);
            const double tps = (decoding + gain) / t;
            if (tps > best * (1 + 1e-9)) { best = tps; best_j = j; best_m = m; }
        }
    }
    int total = 0;
    for (int j = 0; j < best_j; j++) {
        const int i = order[j];
        take[i] = avail[i] < best_m ? avail[i] : best_m;
        total += take[i];
    }
    return total;
}
