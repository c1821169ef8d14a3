/* fuzz_gen_config.c — generation_config.json (g4_gen_config_parse) and the sampling defaults it
 * gives. Invariants on success: every field within the range gen_config.h documents. */
#include <math.h>

#include "engine/gen_config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_gen_config c;
    g4_gen_config_default(&c);
    g4_err err = {0};
    int rc = g4_gen_config_parse((const char *)data, size, "generation_config.json", &c, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        return 0;
    }
    FUZZ_CHECK(c.n_eos >= 0 && c.n_eos <= G4_GEN_MAX_EOS, "n_eos %d", c.n_eos);
    for (int i = 0; i < c.n_eos; i++) FUZZ_CHECK(c.eos_ids[i] >= 0 && g4_gen_config_is_eos(&c, c.eos_ids[i]), "eos %d", c.eos_ids[i]);
    FUZZ_CHECK(c.bos_token_id >= -1 && c.pad_token_id >= -1, "bos/pad");
    FUZZ_CHECK(c.do_sample == 0 || c.do_sample == 1, "do_sample %d", c.do_sample);
    FUZZ_CHECK(c.temperature >= 0 && isfinite(c.temperature), "temperature %g", c.temperature);
    FUZZ_CHECK(c.top_k >= 0, "top_k %d", c.top_k);
    FUZZ_CHECK(c.top_p >= 0 && c.top_p <= 1 && c.min_p >= 0 && c.min_p <= 1, "top_p %g min_p %g", c.top_p, c.min_p);
    FUZZ_CHECK((c.max_new_tokens == -1 || c.max_new_tokens > 0) && (c.max_length == -1 || c.max_length > 0), "lengths");
    g4_sampling_params p;
    memset(&p, 0, sizeof p);
    g4_gen_config_sampling_defaults(&c, &p);
    return 0;
}
