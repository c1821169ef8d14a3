/* cli.c — option helpers shared by the subcommands (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "engine/sampler.h"

const char *cli_engine_help =
    "  --model DIR         model folder: Hugging Face checkpoint or g4tp artifacts (default: built-in demo)\n"
    "  --tp N              tensor-parallel ranks (threads of this process; default 1)\n"
    "  --threads T         threads per rank (default 1)\n"
    "  --comm local|mpi    rank backend (mpi: start with mpirun -np N)\n"
    "  --dtype D           convert weights at load: f32, bf16, f16, q8_0, q4_0 (default: as stored;\n"
    "                      W4A16 checkpoints load as q4_0)\n"
    "  --head-dtype D      the tied embedding/head: bf16, q8_0, q4_0, ... (default: follows --dtype)\n"
    "  --max-batch N       tokens per forward step (prefill chunk; default 128)\n"
    "  --max-ctx N         longest sequence in tokens (default min(config, 8192))\n"
    "  --kv-budget-mb N    KV cache memory per rank (default: what is free after the weights, at\n"
    "                      most a quarter of RAM; docs/kvcache.md); paged in blocks of\n"
    "                      16 positions, it must hold one sequence of --max-ctx\n"
    "  --kv-dtype D        KV cache elements: f32 (default, exact), bf16, q8_0\n"
    "  --math exact|fast   exact (default): fp32 matmuls, the reference; fast: bf16 weights' matmuls\n"
    "                      on activations rounded to bf16 (vdpbf16ps; still bitwise the same across\n"
    "                      TP, threads, batches, prefill/decode; docs/math.md)\n"
    "  --no-prefix-cache   compute every prompt whole (default: reuse the longest cached prefix)\n"
    "  --kv-cache-dir DIR  keep the prefix cache on disk: finished prefixes are written there when idle\n"
    "                      and read back at start, so a restart does not prefill them again\n"
    "  --kv-cache-dir-mb N its disk budget, least recently used out first (default 10240)\n"
    "  --kv-cache-min-tokens N  shorter prefixes are not written (default 256)\n"
    "  --speculative S     speculative decoding, lossless: ngram[:N,K] (prompt lookup: the last N..1\n"
    "                      tokens matched in the text so far, K drafts; default 3,4) or mtp:DIR[:K] (the\n"
    "                      Gemma-4 MTP assistant checkpoint in DIR, K drafts, default 4); K <= 15\n"
    "  --speculative-always  draft every round (default: only when the measured step costs say it pays)\n"
    "  --verify            check every byte of artifact checksums at load\n"
    "  --load mmap|copy    read weights in place from the file map (default), or copy them into\n"
    "                      process memory (huge pages; faster where mapped pages read slowly)\n"
    "  --numa              each rank on one NUMA node's CPUs and memory (rank r: node r mod nodes;\n"
    "                      MPI: the rank's index on its host); prints where each rank runs\n";

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "g4tp: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "g4tp: %s must be an integer in [%lld, %lld] (got \"%s\")\n", flag, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_ids(const char *flag, const char *s, int32_t **ids, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc(sizeof *v * (size_t)cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "g4tp: %s must be comma-separated token ids (got \"%s\")\n", flag, s);
            free(v);
            return 0;
        }
        if (k == cap) v = realloc(v, sizeof *v * (size_t)(cap *= 2));
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    *ids = v;
    *n = k;
    return 1;
}

int cli_engine_flag(int argc, char **argv, int *i, g4_engine_opts *o, int *bad) {
    const char *a = argv[*i], *v;
    long long x;
#define VAL() if (!(v = cli_value(argc, argv, i))) { *bad = 1; return 1; }
    if (!strcmp(a, "--model")) { VAL(); o->model_dir = v; }
    else if (!strcmp(a, "--tp")) { VAL(); if (!cli_int(a, v, 1, 64, &x)) *bad = 1; else o->tp = (int)x; }
    else if (!strcmp(a, "--threads")) { VAL(); if (!cli_int(a, v, 1, 256, &x)) *bad = 1; else o->threads = (int)x; }
    else if (!strcmp(a, "--comm")) { VAL(); o->comm = v; }
    else if (!strcmp(a, "--dtype")) { VAL(); o->dtype = v; }
    else if (!strcmp(a, "--head-dtype")) { VAL(); o->head_dtype = v; }
    else if (!strcmp(a, "--max-batch")) { VAL(); if (!cli_int(a, v, 1, 65536, &x)) *bad = 1; else o->max_batch = (int)x; }
    else if (!strcmp(a, "--max-ctx")) { VAL(); if (!cli_int(a, v, 1, 1LL << 31, &x)) *bad = 1; else o->max_ctx = x; }
    else if (!strcmp(a, "--kv-budget-mb")) { VAL(); if (!cli_int(a, v, 1, 1LL << 40, &x)) *bad = 1; else o->kv_budget_bytes = x << 20; }
    else if (!strcmp(a, "--kv-dtype")) { VAL(); o->kv_dtype = v; }
    else if (!strcmp(a, "--math")) {
        VAL();
        if (strcmp(v, "exact") && strcmp(v, "fast")) { fprintf(stderr, "g4tp: --math must be exact or fast (got \"%s\")\n", v); *bad = 1; }
        else o->math = v;
    }
    else if (!strcmp(a, "--no-prefix-cache")) o->no_prefix_cache = 1;
    else if (!strcmp(a, "--kv-cache-dir")) { VAL(); o->kv_cache_dir = v; }
    else if (!strcmp(a, "--kv-cache-dir-mb")) { VAL(); if (!cli_int(a, v, 1, 1LL << 40, &x)) *bad = 1; else o->kv_cache_dir_bytes = x << 20; }
    else if (!strcmp(a, "--kv-cache-min-tokens")) { VAL(); if (!cli_int(a, v, 1, 1LL << 31, &x)) *bad = 1; else o->kv_cache_min_tokens = x; }
    else if (!strcmp(a, "--speculative")) { VAL(); o->speculative = v; }
    else if (!strcmp(a, "--speculative-always")) o->speculative_always = 1;
    else if (!strcmp(a, "--verify")) o->verify = 1;
    else if (!strcmp(a, "--numa")) o->numa = 1;
    else if (!strcmp(a, "--load")) {
        VAL();
        if (!strcmp(v, "copy")) o->load_copy = 1;
        else if (!strcmp(v, "mmap")) o->load_copy = 0;
        else { fprintf(stderr, "g4tp: --load must be mmap or copy (got \"%s\")\n", v); *bad = 1; }
    }
    else return 0;
#undef VAL
    return 1;
}

const char *cli_default_model(void) {
    const char *env = getenv("G4_DEMO_MODEL");
    if (env && *env) return env;
    static char path[4200];
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        /* <repo>/build-folder/g4tp -> <repo>/models/demo; installed (make install):
         * <prefix>/bin/g4tp -> <prefix>/share/g4tp/models/demo */
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            slash = strrchr(exe, '/');
            if (slash) {
                *slash = 0;
                static const char *const where[] = {"models/demo", "share/g4tp/models/demo"};
                for (int i = 0; i < 2; i++) {
                    snprintf(path, sizeof path, "%s/%s", exe, where[i]);
                    if (g4_is_dir(path)) return path;
                }
            }
        }
    }
    return "models/demo";
}

void cli_error(const char *cmd, const g4_err *err) {
    fprintf(stderr, "g4tp %s: error: %s\n", cmd, err->msg[0] ? err->msg : g4_status_name(err->code));
}

const char *cli_sampling_help =
    "  --temperature T         0 = greedy; default from generation_config.json\n"
    "  --top-k K, --top-p P, --min-p M   sampling filters (defaults from generation_config.json)\n"
    "  --seed S                reproducible sampling\n";

void cli_sampling_init(cli_sampling *s) {
    s->temperature = s->top_p = s->min_p = -1;
    s->top_k = s->seed = -1;
}

int cli_sampling_flag(int argc, char **argv, int *i, cli_sampling *s, int *bad) {
    const char *a = argv[*i], *v;
    double *f = !strcmp(a, "--temperature") ? &s->temperature : !strcmp(a, "--top-p") ? &s->top_p : !strcmp(a, "--min-p") ? &s->min_p : NULL;
    if (f) {
        char *end;
        if (!(v = cli_value(argc, argv, i))) { *bad = 1; return 1; }
        *f = strtod(v, &end);
        if (*end || end == v || !(*f >= 0)) { fprintf(stderr, "g4tp: %s must be a non-negative number (got \"%s\")\n", a, v); *bad = 1; }
        return 1;
    }
    if (!strcmp(a, "--top-k")) { if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, 0, 1 << 30, &s->top_k)) *bad = 1; return 1; }
    if (!strcmp(a, "--seed")) { if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, 0, 1LL << 62, &s->seed)) *bad = 1; return 1; }
    return 0;
}

void cli_sampling_apply(const cli_sampling *s, g4_sampling_params *p) {
    if (s->temperature >= 0) p->temperature = (float)s->temperature;
    if (s->top_p >= 0) p->top_p = (float)s->top_p;
    if (s->min_p >= 0) p->min_p = (float)s->min_p;
    if (s->top_k >= 0) p->top_k = (int)s->top_k;
    if (s->seed >= 0) { p->seed = (uint64_t)s->seed; p->has_seed = 1; }
}
