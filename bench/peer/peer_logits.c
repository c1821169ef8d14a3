/* peer_logits.c — greedy decoding from token ids with llama.cpp's library, for checking that
 * llama.cpp and g4tp compute the same function. Built by bench/peer/run.sh against the cached
 * llama.cpp build (nothing of llama.cpp is in this repository):
 *
 *   peer_logits MODEL.gguf IDS GEN THREADS KV_TYPE OUT.bin
 *
 * IDS is a comma-separated prompt; GEN tokens are generated greedily (argmax, ties to the lowest
 * id: g4tp's rule). OUT.bin gets the logits (little-endian float32, one vocab row per step) at the
 * prompt's last position and after each generated token but the last, like
 * `g4tp generate --dump-all-logits`; stdout gets {"generated_ids": [...]}. KV_TYPE is f32 or f16
 * (llama.cpp's default cache type). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_WARN && level != GGML_LOG_LEVEL_CONT) fputs(text, stderr);
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: peer_logits MODEL.gguf IDS GEN THREADS f32|f16 OUT.bin\n");
        return 2;
    }
    int n_ids = 1;
    for (const char *p = argv[2]; *p; p++) n_ids += *p == ',';
    llama_token *ids = malloc(sizeof *ids * (size_t)n_ids);
    char *s = argv[2], *end;
    for (int i = 0; i < n_ids; i++) {
        ids[i] = (llama_token)strtol(s, &end, 10);
        if (end == s || (*end && *end != ',')) { fprintf(stderr, "peer_logits: bad ids '%s'\n", argv[2]); return 2; }
        s = *end ? end + 1 : end;
    }
    const int gen = atoi(argv[3]), threads = atoi(argv[4]);
    if (gen < 1 || threads < 1 || (strcmp(argv[5], "f32") && strcmp(argv[5], "f16"))) {
        fprintf(stderr, "peer_logits: GEN and THREADS must be >= 1, KV_TYPE f32 or f16\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "peer_logits: cannot load %s\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_ids + gen + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_ids > 512 ? n_ids : 512);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = strcmp(argv[5], "f32") ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "peer_logits: cannot create a context\n"); return 1; }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = fopen(argv[6], "wb");
    if (!out) { perror(argv[6]); return 1; }
    struct llama_batch b = llama_batch_init(n_ids, 0, 1);
    for (int i = 0; i < n_ids; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == n_ids - 1;
    }
    b.n_tokens = n_ids;
    printf("{\"generated_ids\": [");
    int pos = n_ids;
    for (int g = 0; g < gen; g++) {
        if (llama_decode(ctx, b)) { fprintf(stderr, "peer_logits: llama_decode failed\n"); return 1; }
        const float *lg = llama_get_logits_ith(ctx, -1);
        if (fwrite(lg, sizeof(float), (size_t)V, out) != (size_t)V) { perror(argv[6]); return 1; }
        const int id = argmax(lg, V);
        printf("%s%d", g ? ", " : "", id);
        b.n_tokens = 1;
        b.token[0] = id;
        b.pos[0] = pos++;
        b.logits[0] = 1;
    }
    printf("]}\n");
    fclose(out);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
