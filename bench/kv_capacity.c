/* kv_capacity — how many concurrent sequences of a given length fit a fixed KV budget per rank,
 * before and after paging (docs/kvcache.md), from the engine's own geometry code on a config
 * (default: the real 31B's). Before (the per-sequence reservation this engine had until issue
 * 14): each sequence reserved fp32 K/V for prompt + max_tokens positions on full layers and a
 * ring of W + max_batch - 1 on sliding layers when it was admitted. After: a sequence holds the
 * pages of its full-layer blocks up to its length and of one sliding window (plus the blocks a
 * prefill chunk writes ahead), taken as it grows; counted at its longest (prompt + max_tokens)
 * and right after its prompt; in f32, bf16 and q8_0; and when every prompt starts with the same
 * `shared` tokens (a system prompt and tool list), whose blocks the prefix cache holds once (the
 * full blocks, and the sliding blocks of the shared part that are still in a window).
 *   kv_capacity [config.json] [budget_gib] [prompt] [max_tokens] [max_batch] [shared]
 *   defaults: tests/data/spec/gemma-4-31B-it.config.json 32 2048 256 128 1536 */
#include <stdio.h>
#include <stdlib.h>

#include "gemma4/kvpool.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/split.h"

/* bytes the old per-sequence reservation took on this rank */
static double old_bytes(const g4_config *cfg, const g4_tp_plan *plan, int64_t cap, int max_batch) {
    double b = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const g4_layer_cfg *lc = &cfg->layers[l];
        int64_t slots = lc->full ? cap : (int64_t)cfg->sliding_window + max_batch - 1;
        if (slots > cap) slots = cap;
        b += 2.0 * 4.0 * (double)slots * plan->layers[l].n_kv_local * lc->head_dim;
    }
    return b;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tests/data/spec/gemma-4-31B-it.config.json";
    const double budget = (argc > 2 ? atof(argv[2]) : 32.0) * (double)(1 << 30);
    const int64_t prompt = argc > 3 ? atoll(argv[3]) : 2048, maxt = argc > 4 ? atoll(argv[4]) : 256;
    const int mb = argc > 5 ? atoi(argv[5]) : 128;
    const int64_t shared = argc > 6 ? atoll(argv[6]) : 1536;
    g4_config cfg;
    g4_err err = {0};
    if (g4_config_load(path, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    printf("# %s: %d layers, window %d; KV budget %.0f GiB per rank; sequences of %lld prompt + %lld generated tokens; max batch %d\n",
           path, cfg.n_layers, cfg.sliding_window, budget / (double)(1 << 30), (long long)prompt, (long long)maxt, mb);
    printf("| TP | before: reserved per sequence | fit | after (f32): held at %lld / %lld positions | fit (at the longest) | bf16 fit | q8_0 fit | f32 fit, %lld tokens shared |\n",
           (long long)prompt, (long long)(prompt + maxt), (long long)shared);
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    const int tps[3] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        g4_tp_plan plan;
        if (g4_tp_plan_make(&cfg, G4_DT_BF16, tps[i], 0, &plan, &err)) { fprintf(stderr, "%s\n", err.msg); continue; }
        const double ob = old_bytes(&cfg, &plan, prompt + maxt, mb);
        long fit[3], fit_shared = 0;
        double held_p = 0, held_l = 0;
        const int dts[3] = {G4_DT_F32, G4_DT_BF16, G4_DT_Q8_0};
        for (int k = 0; k < 3; k++) {
            g4_kv_geom g;
            if (g4_kv_geom_make(&cfg, &plan, dts[k], &g, &err)) { fit[k] = -1; continue; }
            const int64_t pages = (int64_t)(budget / (double)g.page_bytes);
            const int64_t per = g4_kv_seq_pages(&g, prompt + maxt, 1), per_p = g4_kv_seq_pages(&g, prompt, mb);
            if (k == 0) {
                held_p = (double)per_p * (double)g.page_bytes;
                held_l = (double)per * (double)g.page_bytes;
            }
            fit[k] = (long)(pages / per);
            if (k == 0) {
                /* shared: its whole full blocks once, and its sliding blocks inside the window at
                 * the longest length (the window's start block .. the shared part's end) */
                const int64_t L = prompt + maxt, bs = g.bs, sb = shared / bs;
                const int64_t w0 = L - g.window + 1 > 0 ? (L - g.window + 1) / bs : 0;
                const int64_t sl = sb > w0 ? sb - w0 : 0;
                const int64_t sp = sb * g.ng[G4_KV_FULL] + sl * g.ng[G4_KV_SLIDE];
                fit_shared = (long)((pages - sp) / (per - sp));
            }
            g4_kv_geom_free(&g);
        }
        printf("| %d | %.0f MiB | %ld | %.0f / %.0f MiB | %ld | %ld | %ld | %ld |\n", tps[i], ob / (1 << 20), (long)(budget / ob), held_p / (1 << 20),
               held_l / (1 << 20), fit[0], fit[1], fit[2], fit_shared);
        g4_tp_plan_free(&plan);
    }
    g4_config_free(&cfg);
    return 0;
}
