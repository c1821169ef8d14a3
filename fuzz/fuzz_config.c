/* fuzz_config.c — config.json (g4_config_parse), then what is derived from a parsed config: the
 * tensor table and every layer's RoPE frequencies (as inspect, shard and load do). Invariants on
 * success: the per-layer geometry is within the ranges the parser promises, the table has
 * every tensor with positive dims, and the frequencies are finite. */
#include <math.h>

#include "fuzz_util.h"
#include "model/config.h"
#include "model/tensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_config cfg;
    g4_err err = {0};
    int rc = g4_config_parse((const char *)data, size, &cfg, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(cfg.layers == NULL && cfg.json == NULL, "memory left after a failure");
        return 0;
    }
    FUZZ_CHECK(cfg.json && strlen(cfg.json) <= size, "config text not kept");
    FUZZ_CHECK(cfg.n_layers >= 1 && cfg.layers[cfg.n_layers - 1].full, "the last layer must be full attention");
    FUZZ_CHECK(cfg.n_eos >= 0 && cfg.n_eos <= G4_MAX_EOS, "n_eos %d", cfg.n_eos);
    int max_hd = 0;
    for (int l = 0; l < cfg.n_layers; l++) {
        const g4_layer_cfg *lc = &cfg.layers[l];
        FUZZ_CHECK(lc->head_dim >= 2 && lc->head_dim % 2 == 0 && lc->n_kv >= 1 && cfg.n_heads % lc->n_kv == 0, "layer %d geometry", l);
        FUZZ_CHECK(lc->full ? lc->window == 0 : lc->window >= 1, "layer %d window %d", l, lc->window);
        FUZZ_CHECK(lc->rope_theta > 0 && lc->rope_partial > 0 && lc->rope_partial <= 1 && lc->rope_factor > 0, "layer %d rope", l);
        if (lc->head_dim > max_hd) max_hd = lc->head_dim;
    }
    float *inv = malloc((size_t)max_hd / 2 * sizeof *inv);
    for (int l = 0; l < cfg.n_layers; l++) {
        g4_config_rope_inv_freq(&cfg, l, inv);
        for (int j = 0; j < cfg.layers[l].head_dim / 2; j++) FUZZ_CHECK(!isnan(inv[j]), "layer %d inv_freq[%d] is NaN", l, j);
    }
    free(inv);
    g4_tensor_spec *specs = NULL;
    int n = 0;
    rc = g4_tensor_specs(&cfg, &specs, &n, &err);
    if (rc) FUZZ_CHECK_ERR(rc, err);
    else {
        FUZZ_CHECK(n >= 2, "%d tensors", n);
        for (int i = 0; i < n; i++)
            FUZZ_CHECK((specs[i].ndim == 1 || specs[i].ndim == 2) && specs[i].shape[0] > 0 && (specs[i].ndim == 1 || specs[i].shape[1] > 0),
                       "tensor %s shape", specs[i].name);
    }
    free(specs);
    g4_config_free(&cfg);
    return 0;
}
