/* cmd_inspect.c — `g4tp inspect`: what a model is and what it costs, from its config alone
 * (a config.json file or a model folder): parameters and bytes per component (the vision tower
 * apart, with its cost per image), and with --tp the weight bytes and KV-cache bytes per token
 * of each rank. */
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "cli.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/tensors.h"
#include "model/split.h"

static const char *help =
    "usage: g4tp inspect --model CONFIG_JSON_OR_DIR [--tp N] [--dtype-bytes B]\n\n"
    "Prints the config summary and the parameters and bytes per component, computed from the\n"
    "config (weights need not be present). With --tp N also the weight bytes per rank, the\n"
    "KV-cache bytes per token per rank, and what replicating the global layers' attention on\n"
    "every rank (instead of only their KV heads) would cost. A vision tower (vision_config) is listed\n"
    "apart: its parameters, bytes as stored (bf16; rank 0 holds it) and FLOPs per image.\n"
    "  --dtype-bytes B   bytes per weight for the byte figures (default 2: bf16)\n";

static char *commas(long long v, char *buf) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", v < 0 ? -v : v);
    int n = (int)strlen(tmp), k = 0;
    if (v < 0) buf[k++] = '-';
    for (int i = 0; i < n; i++) {
        buf[k++] = tmp[i];
        if ((n - i - 1) % 3 == 0 && i != n - 1) buf[k++] = ',';
    }
    buf[k] = 0;
    return buf;
}

/* The vision tower: geometry, parameters and bytes by part (bf16 as stored), FLOPs per image at
 * the 31B processor's default budget (280 soft tokens). Returns its bytes (0 without a tower). */
static long long print_vision(const g4_config *cfg) {
    const g4_vision_cfg *v = &cfg->vision;
    if (!v->has_vision) return 0;
    g4_tensor_spec *vs;
    int n;
    g4_err err = {0};
    if (g4_vision_tensor_specs(cfg, &vs, &n, &err)) return 0;
    enum { V_EMB, V_POS, V_LAYERS, V_OUT, V_N };
    const char *names[V_N] = {"vision patch embedding", "vision position table", "vision encoder layers", "vision std + projection"};
    long long cnt[V_N] = {0}, total = 0;
    for (int i = 0; i < n; i++) {
        const int k = vs[i].kind;
        const int c = k == G4_VT_INPUT_PROJ ? V_EMB : k == G4_VT_POS_TABLE ? V_POS : vs[i].layer >= 0 ? V_LAYERS : V_OUT;
        cnt[c] += g4_tensor_spec_numel(&vs[i]);
    }
    free(vs);
    char b1[40], b2[40];
    printf("\nvision     %d layers, hidden %lld, %d heads x %d, intermediate %lld, patch %d, pooling %dx%d, %lld positions per axis\n",
           v->n_layers, (long long)v->hidden, v->n_heads, v->head_dim, (long long)v->intermediate, v->patch_size, v->pooling, v->pooling,
           (long long)v->pos_size);
    printf("           2D RoPE theta %g, rms eps %g%s%s; tokens boi %d, image %d, eoi %d\n", v->rope_theta, v->rms_norm_eps,
           v->standardize ? ", standardize" : "", v->clipped ? ", clipped linears" : "", v->boi_token_id, v->image_token_id, v->eoi_token_id);
    printf("%-28s %18s %20s\n", "component", "parameters", "bytes (bf16)");
    for (int c = 0; c < V_N; c++) {
        printf("%-28s %18s %20s\n", names[c], commas(cnt[c], b1), commas(cnt[c] * 2, b2));
        total += cnt[c];
    }
    printf("%-28s %18s %20s (%.2f GiB)\n", "vision tower total", commas(total, b1), commas(total * 2, b2), total * 2 / 1073741824.0);
    const double np = 280.0 * v->pooling * v->pooling, H = (double)v->hidden, A = (double)v->n_heads * v->head_dim;
    const double lin = 2 * np * (H * 3 * v->patch_size * v->patch_size + v->n_layers * (4 * A * H + 3 * H * (double)v->intermediate)) +
                       2 * 280.0 * H * (double)cfg->hidden_size;
    const double att = 4.0 * v->n_layers * np * np * A;
    printf("per image of 280 soft tokens (%.0f patches): %.2f TFLOP in the linears + %.2f TFLOP attention\n", np, lin / 1e12, att / 1e12);
    return total * 2;
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    long long tp = 0, db = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(help, stdout); return 0; }
        if (!strcmp(a, "--model")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--tp")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 64, &tp)) return 2; }
        else if (!strcmp(a, "--dtype-bytes")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 8, &db)) return 2; }
        else { fprintf(stderr, "g4tp inspect: unknown option %s (see --help)\n", a); return 2; }
    }
    if (!model) model = cli_default_model();
    char *cpath = g4_is_dir(model) ? g4_path_join(model, "config.json") : strdup(model);
    g4_config cfg;
    g4_err err = {0};
    if (g4_config_load(cpath, &cfg, &err)) { cli_error("inspect", &err); free(cpath); return 1; }
    free(cpath);
    g4_tensor_spec *specs;
    int ns;
    if (g4_tensor_specs(&cfg, &specs, &ns, &err)) { cli_error("inspect", &err); g4_config_free(&cfg); return 1; }
    int nfull = 0;
    for (int l = 0; l < cfg.n_layers; l++) nfull += cfg.layers[l].full;
    char b1[40], b2[40];
    printf("model      %s%s\n", cfg.architecture[0] ? cfg.architecture : "(no architectures key)", cfg.multimodal ? " (text_config)" : "");
    printf("layers     %d: %d sliding (window %d), %d full\n", cfg.n_layers, cfg.n_layers - nfull, cfg.sliding_window, nfull);
    printf("hidden     %lld, intermediate %lld, vocab %lld, max positions %lld\n", (long long)cfg.hidden_size,
           (long long)cfg.intermediate_size, (long long)cfg.vocab_size, (long long)cfg.max_position_embeddings);
    printf("attention  %d query heads; sliding %d KV x %d; full %d KV x %d%s; scale 1.0\n", cfg.n_heads, cfg.n_kv_heads,
           cfg.head_dim, cfg.attention_k_eq_v ? cfg.n_global_kv_heads : cfg.n_kv_heads, cfg.global_head_dim,
           cfg.attention_k_eq_v ? " (K = V, no v_proj)" : "");
    printf("softcap    %g, rms eps %g, embed scale %.7g\n", cfg.final_logit_softcapping, cfg.rms_norm_eps, (double)g4_config_embed_scale(&cfg));
    char degrees[128], q8[128];
    g4_tp_valid_degrees(&cfg, -1, degrees, sizeof degrees);
    printf("tp degrees %s (reduction slices: attention %d, mlp %d)", degrees, g4_tp_slices_attn(&cfg), g4_tp_slices_mlp(&cfg, -1));
    /* q8_0 blocks need 32-column slices: fewer MLP slices, maybe fewer degrees */
    g4_tp_valid_degrees(&cfg, G4_DT_Q8_0, q8, sizeof q8);
    if (g4_tp_slices_mlp(&cfg, G4_DT_Q8_0) != g4_tp_slices_mlp(&cfg, -1))
        printf("; q8_0: %s (mlp %d)", g4_tp_check_dtype(&cfg, G4_DT_Q8_0, &err) ? "unsupported" : q8, g4_tp_slices_mlp(&cfg, G4_DT_Q8_0));
    printf("\n\n");

    enum { C_EMB, C_ATT_S, C_ATT_F, C_MLP, C_NORM, C_SCAL, C_N };
    const char *names[C_N] = {"embedding (tied head)", "attention, sliding layers", "attention, full layers", "mlp", "norms", "layer scalars"};
    long long cnt[C_N] = {0};
    for (int i = 0; i < ns; i++) {
        const g4_tensor_spec *s = &specs[i];
        long long n = g4_tensor_spec_numel(s);
        int c;
        switch (s->kind) {
        case G4_T_EMBED: c = C_EMB; break;
        case G4_T_Q: case G4_T_K: case G4_T_V: case G4_T_O: c = cfg.layers[s->layer].full ? C_ATT_F : C_ATT_S; break;
        case G4_T_GATE: case G4_T_UP: case G4_T_DOWN: c = C_MLP; break;
        case G4_T_SCALAR: c = C_SCAL; break;
        default: c = C_NORM;
        }
        cnt[c] += n;
    }
    long long total = 0;
    printf("%-28s %18s %20s\n", "component", "parameters", "bytes");
    for (int c = 0; c < C_N; c++) {
        printf("%-28s %18s %20s\n", names[c], commas(cnt[c], b1), commas(cnt[c] * db, b2));
        total += cnt[c];
    }
    printf("%-28s %18s %20s (%.2f GiB)\n", "text model total", commas(total, b1), commas(total * db, b2), total * db / 1073741824.0);

    /* decode reads every weight once per step: the bytes per token of each weight format */
    const long long layers = cnt[C_ATT_S] + cnt[C_ATT_F] + cnt[C_MLP], small = cnt[C_NORM] * 2 + cnt[C_SCAL] * 2;
    const struct { const char *mat, *head; double bm, bh; } fmts[] = {
        {"bf16", "bf16", 2, 2}, {"q8_0", "bf16", 34.0 / 32, 2}, {"q8_0", "q8_0", 34.0 / 32, 34.0 / 32},
        {"q4_0", "bf16", 18.0 / 32, 2}, {"q4_0", "q8_0", 18.0 / 32, 34.0 / 32}, {"q4_0", "q4_0", 18.0 / 32, 18.0 / 32}};
    printf("\n%-28s %20s %10s\n", "weights (--dtype / --head-dtype)", "bytes per token", "head share");
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        double head = (double)cnt[C_EMB] * fmts[f].bh, all = (double)layers * fmts[f].bm + head + (double)small;
        char label[40];
        snprintf(label, sizeof label, "%s / head %s", fmts[f].mat, fmts[f].head);
        printf("%-28s %20s %9.1f %%\n", label, commas((long long)all, b1), 100.0 * head / all);
    }
    const long long vision_bytes = print_vision(&cfg);

    if (tp > 0) {
        g4_tp_plan plan;
        if (g4_tp_plan_make(&cfg, -1, (int)tp, 0, &plan, &err)) { cli_error("inspect", &err); free(specs); g4_config_free(&cfg); return 1; }
        printf("\nTP = %lld\n", tp);
        printf("%-6s %20s %22s %22s\n", "rank", "weight bytes", "KV B/token (fp32)", "KV B/token (bf16)");
        long long legacy_max = 0, ours_max = 0;
        for (int r = 0; r < tp; r++) {
            g4_tp_plan p;
            g4_tp_plan_make(&cfg, -1, (int)tp, r, &p, &err);
            long long bytes = 0, legacy = 0, kv = 0;
            for (int i = 0; i < ns; i++) {
                int64_t r0, nr, c0, nc;
                g4_tp_tensor_slice(&cfg, &p, &specs[i], &r0, &nr, &c0, &nc);
                long long part = (long long)nr * nc * db;
                bytes += part;
                int att = specs[i].kind == G4_T_Q || specs[i].kind == G4_T_K || specs[i].kind == G4_T_V || specs[i].kind == G4_T_O;
                legacy += att && cfg.layers[specs[i].layer].full && cfg.layers[specs[i].layer].n_kv < tp ? g4_tensor_spec_numel(&specs[i]) * db : part;
            }
            for (int l = 0; l < cfg.n_layers; l++) kv += 2LL * p.layers[l].n_kv_local * cfg.layers[l].head_dim;
            printf("%-6d %20s %22s %22s\n", r, commas(bytes, b1), commas(kv * 4, b2), commas(kv * 2, (char[40]){0}));
            if (bytes > ours_max) ours_max = bytes;
            if (legacy > legacy_max) legacy_max = legacy;
            g4_tp_plan_free(&p);
        }
        printf("(sliding layers hold at most %d tokens; full layers grow with the context)\n", cfg.sliding_window);
        if (vision_bytes) printf("rank 0 also holds the vision tower: %s bytes\n", commas(vision_bytes, b1));
        if (legacy_max != ours_max)
            printf("replicating the full layers' attention on every rank instead: %s bytes per rank (+%.1f %%)\n",
                   commas(legacy_max, b1), 100.0 * (double)(legacy_max - ours_max) / (double)ours_max);
        else
            printf("every layer has at least as many KV heads as ranks: nothing is replicated\n");
        g4_tp_plan_free(&plan);
    }
    free(specs);
    g4_config_free(&cfg);
    return 0;
}
