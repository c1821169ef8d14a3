/* attention_tokens (a tile of tokens reading keys they share in one pass): every token's bits
 * are those of attention / attention_kv over its own keys alone, for f32, bf16 and q8_0 rows,
 * head dims on and off the 16/32/64-wide slices, 1..8 tokens x 1..8 heads, the key ranges of
 * prefill (causal: nested), sliding windows (shifted), image blocks (a run ending together),
 * empty and disjoint ranges, keys cut into segments anywhere; nothing written past the rows. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static uint32_t rs = 777;
static float frand(void) {
    rs = rs * 1664525u + 1013904223u;
    return (float)((rs >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static int irand(int n) {
    rs = rs * 1664525u + 1013904223u;
    return (int)((rs >> 9) % (uint32_t)n);
}

/* n rows of d values of type dt, stride bytes apart */
static void make_rows(int dt, int64_t n, int64_t d, int64_t stride, uint8_t *raw) {
    float x[512];
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < d; i++) x[i] = frand() * 3.0f;
        uint8_t *r = raw + j * stride;
        if (dt == G4_DT_F32) memcpy(r, x, sizeof(float) * (size_t)d);
        else if (dt == G4_DT_BF16)
            for (int64_t i = 0; i < d; i++) ((uint16_t *)r)[i] = g4_f32_to_bf16(x[i]);
        else g4_quantize_row_q8_0(x, (g4_block_q8_0 *)r, d);
    }
}

/* keys [a, e) of rows k/v (stride bytes) as segments of random lengths (1..20) */
static int cut(int dt, const uint8_t *k, const uint8_t *v, int64_t stride, int64_t a, int64_t e, g4_kv_seg *fs,
               g4_kvq_seg *qs) {
    int n = 0;
    for (int64_t j = a; j < e; n++) {
        int64_t len = 1 + irand(20);
        if (len > e - j) len = e - j;
        if (dt == G4_DT_F32) fs[n] = (g4_kv_seg){(const float *)(k + j * stride), (const float *)(v + j * stride), len, stride / 4};
        else qs[n] = (g4_kvq_seg){k + j * stride, v + j * stride, len, stride};
        j += len;
    }
    return n;
}

enum { MAXK = 300, MAXT = 8, MAXH = 8, MAXD = 512 };

/* one case: nt tokens x nq heads, token t reading keys [k0[t], k1[t]) of nk keys */
static void check(const g4_kernels *K, int dt, int64_t d, int nt, int nq, int64_t nk, const int64_t *k0,
                  const int64_t *k1, const char *what) {
    const int64_t stride = (int64_t)g4_dtype_row_bytes(dt, d) + 64;
    uint8_t *kr = malloc((size_t)(nk * stride)), *vr = malloc((size_t)(nk * stride));
    make_rows(dt, nk, d, stride, kr);
    make_rows(dt, nk, d, stride, vr);
    const int64_t ldq = nq * d + 16, ldo = nq * d + 8;
    float *q = malloc(sizeof(float) * (size_t)(nt * ldq)), *out = malloc(sizeof(float) * (size_t)(nt * ldo + 64));
    float *one = malloc(sizeof(float) * (size_t)(nq * d));
    float *sc = malloc(sizeof(float) * (G4_ATTN_TOKENS_SCRATCH(nt, nq, nk) + G4_ATTN_KV_SCRATCH(nq, nk, d)));
    for (int64_t i = 0; i < nt * ldq; i++) q[i] = frand();
    for (int64_t i = 0; i < nt * ldo + 64; i++) out[i] = -7.0f;
    static g4_kv_seg fs[MAXK + 1];
    static g4_kvq_seg qs[MAXK + 1];
    const int nseg = cut(dt, kr, vr, stride, 0, nk, fs, qs);
    K->attention_tokens(out, ldo, q, ldq, nt, nq, d, dt == G4_DT_F32 ? (const void *)fs : (const void *)qs, nseg, dt,
                        k0, k1, sc);
    for (int t = 0; t < nt; t++) {
        for (int64_t i = nq * d; i < ldo; i++)
            if (out[t * ldo + i] != -7.0f) fail_msg("%s %s: token %d wrote past its heads", K->name, what, t);
        const int n1 = cut(dt, kr, vr, stride, k0[t], k1[t] > k0[t] ? k1[t] : k0[t], fs, qs);
        if (dt == G4_DT_F32) K->attention(one, q + t * ldq, nq, d, fs, n1, sc);
        else K->attention_kv(one, q + t * ldq, nq, d, qs, n1, dt, sc);
        if (memcmp(one, out + t * ldo, sizeof(float) * (size_t)(nq * d)))
            fail_msg("%s %s %s d=%lld nt=%d nq=%d: token %d (keys %lld..%lld) differs from attention alone", K->name,
                     what, g4_dtype_name(dt), (long long)d, nt, nq, t, (long long)k0[t], (long long)k1[t]);
    }
    for (int64_t i = nt * ldo; i < nt * ldo + 64; i++)
        if (out[i] != -7.0f) fail_msg("%s %s: wrote past the last token", K->name, what);
    free(kr), free(vr), free(q), free(out), free(one), free(sc);
}

static void test_tokens_equal_alone(void **state) {
    (void)state;
    const g4_kernels *K = g4_kernels_by_name("avx512");
    if (!K) skip();
    assert_non_null(K->attention_tokens);
    const int dts[3] = {G4_DT_F32, G4_DT_BF16, G4_DT_Q8_0};
    const int64_t dims[3][4] = {{7, 40, 96, 256}, {16, 48, 100, 512}, {32, 64, 96, 512}};
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < 4; ki++) {
            const int64_t d = dims[di][ki];
            for (int c = 0; c < 12; c++) {
                const int nt = 1 + irand(MAXT), nq = 1 + irand(c < 8 ? 4 : MAXH);
                int64_t k0[MAXT], k1[MAXT], nk = 0;
                const int64_t p = irand(200), w = 1 + irand(60);
                const char *what = "";
                for (int t = 0; t < nt; t++) {
                    switch (c % 4) {
                    case 0: what = "causal", k0[t] = 0, k1[t] = p + t + 1; break;
                    case 1: what = "sliding", k0[t] = p + t, k1[t] = p + t + w; break;
                    case 2: /* an image block: the first tokens end with it, the others causal */
                        what = "image", k0[t] = 0, k1[t] = t < nt / 2 ? p + nt / 2 : p + t + 1;
                        break;
                    default: /* anything: empty, disjoint, nested */
                        what = "random", k0[t] = irand(150), k1[t] = irand(4) ? k0[t] + irand(120) : k0[t];
                    }
                    if (k1[t] > nk) nk = k1[t];
                }
                if (nk == 0) nk = 1;
                check(K, dts[di], d, nt, nq, nk, k0, k1, what);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_equal_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
