/* sampler.c — token selection from one row of logits: greedy, temperature, top-k, top-p, min-p,
 * a seeded PRNG of our own and a deterministic exp().
 *
 * Owns the order of the filters (HF generate(): temperature -> top-k -> top-p -> min-p -> draw)
 * and the tie rules (lower id wins everywhere). The hot path works in a workspace allocated at
 * creation: top-k is a bounded min-heap over the logits (one pass, no full sort); without top-k,
 * top-p is a quickselect-style partition that stops as soon as the kept mass reaches top_p.
 * Knows nothing about models, tokenizers or requests: it sees floats and returns an index. */
#include "engine/sampler.h"

#include <float.h>
#include <pthread.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The reproducibility claim needs plain IEEE double evaluation (not x87 extended precision). */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#warning "FLT_EVAL_METHOD != 0: seeded sampling may differ from other machines"
#endif

/* ---------------------------------------------------------------- PRNG and exp */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void g4_rng_seed(g4_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    /* xoshiro must not start all-zero; splitmix64 cannot give four zeros, but be explicit. */
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t g4_rng_next(g4_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double g4_rng_uniform(g4_rng *r) { return (double)(g4_rng_next(r) >> 11) * 0x1.0p-53; }

/* 2^k exactly for -1074 <= k <= 1023 (2^-1075 rounds to 0); subnormals in two steps. */
static inline double pow2i(long k) {
    union { uint64_t u; double d; } b;
    if (k >= -1022) {
        b.u = (uint64_t)(k + 1023) << 52;
        return b.d;
    }
    b.u = (uint64_t)(k + 600 + 1023) << 52; /* 2^(k+600) */
    return b.d * 0x1.0p-600;
}

/* exp on [-ln2/2, ln2/2] and beyond by plain range reduction; used once to build the table. */
static double exp_slow(double x) {
    /* x = k ln2 + r, |r| <= ln2/2; ln2 split so that k*LN2_HI is exact (fdlibm constants). */
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    const double INV_LN2 = 1.44269504088896338700e+00;
    double t = x * INV_LN2 + 0.5;
    long ki = (long)t;
    if ((double)ki > t) ki--;
    double kd = (double)ki;
    double r = (x - kd * LN2_HI) - kd * LN2_LO;
    /* Taylor series to degree 13: |r|^14/14! < 3e-18 for |r| <= 0.347. */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    return p * pow2i(ki);
}

/* 2^(j/64), j = 0..63, computed once by exp_slow (deterministic, so the table is too). */
static double exp_tab[64];
static pthread_once_t exp_tab_once = PTHREAD_ONCE_INIT;
static void exp_tab_init(void) {
    const double LN2 = 6.93147180559945286227e-01;
    for (int j = 0; j < 64; j++) exp_tab[j] = exp_slow((double)j * (LN2 / 64.0));
}

double g4_det_exp(double x) {
    if (x != x) return x;                 /* NaN */
    if (x < -745.2) return 0.0;           /* also -inf */
    if (x > 709.7) return HUGE_VAL;
    pthread_once(&exp_tab_once, exp_tab_init);
    /* x = (64m + j) ln2/64 + r, |r| <= ln2/128: exp(x) = 2^m * 2^(j/64) * exp(r). The split of
     * ln2/64 makes k*HI exact for |k| < 2^21 (fdlibm's ln2_hi has 21 trailing zero bits). */
    const double HI = 6.93147180369123816490e-01 / 64.0, LO = 1.90821492927058770002e-10 / 64.0;
    const double INV = 64.0 * 1.44269504088896338700e+00;
    double t = x * INV + 0.5;
    long k = (long)t; /* truncation; floor by hand (libm calls are slow) */
    if ((double)k > t) k--;
    double kd = (double)k;
    double r = (x - kd * HI) - kd * LO;
    /* degree 5: |r|^6/6! < 4e-17 for |r| <= 0.0055. Horner; -std=c11 means no FMA contraction,
     * so every IEEE machine rounds each step the same way. */
    double p = 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    long j = k & 63, m = (k - j) / 64;
    p *= exp_tab[j];
    if (m > 1023) return (p * 2.0) * pow2i(m - 1);
    return p * pow2i(m);
}

/* ---------------------------------------------------------------- params */

void g4_sampling_params_default(g4_sampling_params *p) {
    p->temperature = 0.0f;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->top_k = 0;
    p->seed = 0;
    p->has_seed = 0;
}

int g4_sampling_params_validate(const g4_sampling_params *p, g4_err *err) {
    if (!p) return g4_err_set(err, G4_EINVAL, "sampling params: NULL");
    if (!isfinite(p->temperature) || p->temperature < 0.0f)
        return g4_err_set(err, G4_EINVAL, "sampling params: temperature must be a finite number >= 0 (got %g)",
                          (double)p->temperature);
    if (!isfinite(p->top_p) || p->top_p < 0.0f || p->top_p > 1.0f)
        return g4_err_set(err, G4_EINVAL, "sampling params: top_p must be in [0, 1] (got %g)", (double)p->top_p);
    if (!isfinite(p->min_p) || p->min_p < 0.0f || p->min_p > 1.0f)
        return g4_err_set(err, G4_EINVAL, "sampling params: min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (p->top_k < 0)
        return g4_err_set(err, G4_EINVAL, "sampling params: top_k must be >= 0 (got %d; 0 turns it off)", p->top_k);
    return G4_OK;
}

int g4_sampling_params_is_greedy(const g4_sampling_params *p) {
    return p->temperature <= 0.0f || p->top_k == 1;
}

/* ---------------------------------------------------------------- sampler */

typedef struct {
    double v;   /* logit while selecting, then the unnormalised weight exp((l - max) / T) */
    int32_t id;
} cand;

struct g4_sampler {
    int cap;
    g4_sampling_params p;
    g4_rng rng;
    cand *c; /* cap entries */
};

/* a ranks before b: larger value, then lower id. A strict total order (ids are distinct). */
static inline int better(const cand *a, const cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

/* Min-heap on `better`: the root is the worst element. */
static void sift_down(cand *h, int n, int i) {
    cand x = h[i];
    for (;;) {
        int l = 2 * i + 1;
        if (l >= n) break;
        int w = l;
        if (l + 1 < n && better(&h[l], &h[l + 1])) w = l + 1; /* the worse child */
        if (!better(&x, &h[w])) break; /* x is already worse than (or equal to) both children */
        h[i] = h[w];
        i = w;
    }
    h[i] = x;
}

static void sift_up(cand *h, int i) {
    cand x = h[i];
    while (i > 0) {
        int par = (i - 1) / 2;
        if (!better(&h[par], &x)) break; /* parent already worse: heap holds */
        h[i] = h[par];
        i = par;
    }
    h[i] = x;
}

/* Sorts best first (heap sort on the worst-at-root heap; no allocation). */
static void sort_desc(cand *c, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(c, n, i);
    for (int end = n - 1; end > 0; end--) {
        cand t = c[0];
        c[0] = c[end];
        c[end] = t;
        sift_down(c, end, 0);
    }
}

static uint64_t clock_seed(void) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
    x ^= (uint64_t)getpid() << 32;
    return splitmix64(&x);
}

int g4_sampler_reset(g4_sampler *s, const g4_sampling_params *p, g4_err *err) {
    if (!s) return g4_err_set(err, G4_EINVAL, "sampler: NULL");
    int rc = g4_sampling_params_validate(p, err);
    if (rc) return rc;
    s->p = *p;
    g4_rng_seed(&s->rng, p->has_seed ? p->seed : clock_seed());
    return G4_OK;
}

int g4_sampler_create(int n_vocab, const g4_sampling_params *p, g4_sampler **out, g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "sampler: NULL output pointer");
    *out = NULL;
    if (n_vocab <= 0) return g4_err_set(err, G4_EINVAL, "sampler: vocabulary size must be > 0 (got %d)", n_vocab);
    int rc = g4_sampling_params_validate(p, err);
    if (rc) return rc;
    g4_sampler *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "sampler: out of memory");
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) {
        free(s);
        return g4_err_set(err, G4_ENOMEM, "sampler: out of memory for a %d-entry workspace", n_vocab);
    }
    s->cap = n_vocab;
    g4_sampler_reset(s, p, NULL);
    *out = s;
    return G4_OK;
}

void g4_sampler_free(g4_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
}

const g4_sampling_params *g4_sampler_params(const g4_sampler *s) { return &s->p; }

int32_t g4_sample_greedy(const float *logits, int n_vocab) {
    if (!logits || n_vocab <= 0) return G4_SAMPLE_EARG;
    int32_t best = -1;
    float bv = 0.0f;
    for (int i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (!(l >= -FLT_MAX) && !(l > FLT_MAX)) continue; /* NaN or -inf */
        if (best < 0 || l > bv) { best = i; bv = l; }   /* strict >: the lowest id keeps a tie */
    }
    return best >= 0 ? best : G4_SAMPLE_ENOFINITE;
}

/* Maps a logit to the working domain: NaN/-inf -> skip (returns 0), +inf -> FLT_MAX. */
static inline int usable(float l, double *v) {
    if (!(l >= -FLT_MAX)) return 0;
    *v = l > FLT_MAX ? (double)FLT_MAX : (double)l;
    return 1;
}

/* Keeps the smallest prefix, in `better` order, of c[0..m) whose weight reaches target, moving
 * it to c[0..kept) (unsorted). Always keeps at least one. Deterministic pivots (median of 3). */
static int top_p_select(cand *c, int m, double target) {
    int lo = 0, hi = m;
    double acc = 0.0;
    while (lo < hi && (acc < target || lo == 0)) { /* lo == 0: the best must reach c[0] */
        int mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three into c[last] */
        if (better(&c[mid], &c[lo])) { cand t = c[mid]; c[mid] = c[lo]; c[lo] = t; }
        if (better(&c[last], &c[lo])) { cand t = c[last]; c[last] = c[lo]; c[lo] = t; }
        if (better(&c[mid], &c[last])) { cand t = c[mid]; c[mid] = c[last]; c[last] = t; }
        /* now c[lo] best, c[last] median: partition c[lo..last) by "better than pivot" */
        cand piv = c[last];
        int st = lo;
        double s = 0.0;
        for (int i = lo; i < last; i++) {
            if (better(&c[i], &piv)) {
                s += c[i].v;
                cand t = c[i]; c[i] = c[st]; c[st] = t;
                st++;
            }
        }
        c[last] = c[st];
        c[st] = piv;
        if (acc + s >= target) {
            hi = st; /* the boundary lies among the better ones; pivot and worse are dropped */
        } else {
            acc += s + piv.v;
            lo = st + 1;
        }
    }
    return lo > 0 ? lo : 1;
}

/* Builds the candidate set in s->c[0..*m) with weights; *total their sum; *sorted whether the
 * set is in `better` order. Returns 0 or a negative code. */
static int build(g4_sampler *s, const float *logits, int n, int *m_out, double *total_out, int *sorted) {
    const g4_sampling_params *p = &s->p;
    cand *c = s->c;
    const double T = p->temperature;
    int k = p->top_k;
    if (k >= n) k = 0;
    int m = 0;
    double total = 0.0;

    if (k > 0) {
        /* one pass, bounded worst-at-root heap of the k best logits */
        double root = 0.0;
        for (int i = 0; i < n; i++) {
            double v;
            if (!usable(logits[i], &v)) continue;
            if (m < k) {
                c[m].v = v;
                c[m].id = i;
                sift_up(c, m);
                m++;
                root = c[0].v;
            } else if (v > root) { /* equal value: the later (higher) id is worse, skip it */
                c[0].v = v;
                c[0].id = i;
                sift_down(c, m, 0);
                root = c[0].v;
            }
        }
        if (m == 0) return G4_SAMPLE_ENOFINITE;
        sort_desc(c, m);
        const double mx = c[0].v;
        for (int i = 0; i < m; i++) {
            c[i].v = g4_det_exp((c[i].v - mx) / T);
            total += c[i].v;
        }
        while (m > 1 && c[m - 1].v == 0.0) m--; /* underflowed weights: never drawn */
        if (p->top_p < 1.0f) {
            const double target = (double)p->top_p * total;
            double before = 0.0;
            int keep = 1;
            before = c[0].v;
            while (keep < m && before < target) before += c[keep++].v;
            m = keep;
        }
        if (p->min_p > 0.0f) {
            int keep = 1; /* c[0].v == 1 >= min_p always */
            while (keep < m && c[keep].v >= (double)p->min_p) keep++;
            m = keep;
        }
        total = 0.0;
        for (int i = 0; i < m; i++) total += c[i].v;
        *sorted = 1;
    } else {
        double mx = -HUGE_VAL;
        int any = 0;
        for (int i = 0; i < n; i++) {
            double v;
            if (!usable(logits[i], &v)) continue;
            if (!any || v > mx) mx = v;
            any = 1;
        }
        if (!any) return G4_SAMPLE_ENOFINITE;
        for (int i = 0; i < n; i++) {
            double v;
            if (!usable(logits[i], &v)) continue;
            double w = g4_det_exp((v - mx) / T);
            if (w > 0.0) {
                c[m].v = w;
                c[m].id = i;
                total += w;
                m++;
            }
        }
        /* the max itself has weight 1, so m >= 1 */
        *sorted = 0;
        int filtered = 0;
        /* top-p and min-p each keep a prefix of the sorted order, so the result is the shorter
         * prefix: filtering by min-p first and then selecting the top-p prefix against the mass
         * of the FULL distribution gives the same set, and partitions fewer entries. */
        if (p->min_p > 0.0f) {
            int j = 0;
            for (int i = 0; i < m; i++)
                if (c[i].v >= (double)p->min_p) c[j++] = c[i];
            m = j; /* the max (weight 1) survives */
            filtered = 1;
        }
        if (p->top_p < 1.0f) {
            m = top_p_select(c, m, (double)p->top_p * total);
            filtered = 1;
        }
        if (filtered) {
            total = 0.0;
            for (int i = 0; i < m; i++) total += c[i].v;
        }
    }
    *m_out = m;
    *total_out = total;
    return 0;
}

int32_t g4_sampler_sample(g4_sampler *s, const float *logits, int n_vocab) {
    if (!s || !logits || n_vocab <= 0 || n_vocab > s->cap) return G4_SAMPLE_EARG;
    if (g4_sampling_params_is_greedy(&s->p)) return g4_sample_greedy(logits, n_vocab);
    int m, sorted;
    double total;
    int rc = build(s, logits, n_vocab, &m, &total, &sorted);
    if (rc < 0) return rc;
    const double r = g4_rng_uniform(&s->rng) * total;
    double acc = 0.0;
    for (int i = 0; i < m; i++) {
        acc += s->c[i].v;
        if (r < acc) return s->c[i].id;
    }
    return s->c[m - 1].id; /* r within rounding of total */
}

void g4_logits_mask(float *logits, int n, const uint64_t *allow) {
    for (int w = 0; w * 64 < n; w++) {
        uint64_t bits = allow[w];
        if (bits == ~0ull) continue;
        int end = n - w * 64 < 64 ? n - w * 64 : 64;
        float *l = logits + (size_t)w * 64;
        if (!bits) { for (int i = 0; i < end; i++) l[i] = -INFINITY; continue; }
        for (int i = 0; i < end; i++) if (!((bits >> i) & 1)) l[i] = -INFINITY;
    }
}

int32_t g4_sampler_sample_masked(g4_sampler *s, float *logits, int n_vocab, const uint64_t *allow) {
    if (!s || !logits || !allow || n_vocab <= 0 || n_vocab > s->cap) return G4_SAMPLE_EARG;
    g4_logits_mask(logits, n_vocab, allow);
    return g4_sampler_sample(s, logits, n_vocab);
}

int g4_sampler_candidates(g4_sampler *s, const float *logits, int n_vocab, int32_t *ids, float *probs, int cap) {
    if (!s || !logits || n_vocab <= 0 || n_vocab > s->cap || cap < 0 || (cap > 0 && (!ids || !probs)))
        return G4_SAMPLE_EARG;
    if (g4_sampling_params_is_greedy(&s->p)) {
        int32_t id = g4_sample_greedy(logits, n_vocab);
        if (id < 0) return id;
        if (cap > 0) { ids[0] = id; probs[0] = 1.0f; }
        return 1;
    }
    int m, sorted;
    double total;
    int rc = build(s, logits, n_vocab, &m, &total, &sorted);
    if (rc < 0) return rc;
    if (!sorted) sort_desc(s->c, m);
    for (int i = 0; i < m && i < cap; i++) {
        ids[i] = s->c[i].id;
        probs[i] = (float)(s->c[i].v / total);
    }
    return m;
}
