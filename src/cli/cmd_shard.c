/* cmd_shard.c — `g4tp shard`: compiles a Hugging Face checkpoint into per-rank artifacts
 * (model/artifact.h does the work). Owns the flags, the progress bar (only on a terminal) and
 * Ctrl-C: an interrupt stops the writer, which removes its temporary folder. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "cli.h"
#include "kernels/kernels.h"
#include "model/artifact.h"
#include "model/compressed.h"

static const char *help =
    "usage: g4tp shard --model HF_DIR --tp N --out DIR [--dtype D] [--head-dtype D]\n       [--q4-layout auto|blocks|grouped] [--no-vision] [--force]\n\n"
    "Writes DIR/manifest.json and one DIR/rank-RRRRR-of-NNNNN.g4w per rank: each rank's slice of\n"
    "every tensor, laid out for the kernels, mapped in place at load (g4tp generate --model DIR).\n"
    "  --model HF_DIR   Hugging Face checkpoint folder (config.json + safetensors)\n"
    "  --tp N           tensor-parallel degree the artifacts are for\n"
    "  --out DIR        output folder (written atomically: DIR.tmp-PID, then renamed)\n"
    "  --dtype D        f32, bf16, f16, q8_0 or q4_0 for the matrices (default: as stored;\n"
    "                   compressed-tensors W4A16 weights become q4_0, exactly); q8_0 o_proj /\n"
    "                   down_proj wider than 5376 columns on a rank are stored in column parts\n"
    "                   (format version 6), which the avx512 decode streams faster\n"
    "  --head-dtype D   the tied embedding/head (default: follows --dtype; as stored without it)\n"
    "  --q4-layout L    q4_0 matrices as llama.cpp's blocks (every kernel set reads them) or in\n"
    "                   the grouped layout the avx512 set reads (loaded elsewhere: ungrouped\n"
    "                   in memory), where o_proj / down_proj wider than 10752 columns on a rank\n"
    "                   are also stored in column parts (format version 4) and each row's partial\n"
    "                   last group in the tail layout (version 5; G4_Q4_TAIL=0: as blocks, a\n"
    "                   folder older builds read); auto (default): the layout this machine's\n"
    "                   kernels read\n"
    "  --no-vision      leave the checkpoint's vision tower out (a text-only folder); by default\n"
    "                   rank 0's file also holds it, whole and as stored (--dtype is for the text\n"
    "                   model; only the leader runs the tower)\n"
    "  --force          replace DIR if it is an artifact folder already\n"
    "  --quiet          no progress bar even on a terminal\n"
    "  --verbose        list every quantized tensor, also those converted exactly\n\n"
    "Each block-quantized tensor whose conversion is not exact is printed with its normalised\n"
    "squared error (nmse), then a summary line. G4_ROWPAR_PART_COLS=N: column parts of at most\n"
    "N columns for both dtypes (0: none, every row whole).\n";

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { (void)sig; interrupted = 1; }

typedef struct { double t0, last; int n, exact, verbose; double worst; char worst_name[96]; } bar;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(void *ud, uint64_t done, uint64_t total) {
    bar *b = ud;
    double t = now_s();
    if (done < total && t - b->last < 0.2) return;
    b->last = t;
    double el = t - b->t0, mbs = el > 0 ? (double)done / 1e6 / el : 0;
    double eta = done > 0 && done < total ? el * (double)(total - done) / (double)done : 0;
    int w = 30, fill = total ? (int)((double)w * (double)done / (double)total) : w;
    char line[w + 1];
    for (int i = 0; i < w; i++) line[i] = i < fill ? '#' : '.';
    line[w] = 0;
    fprintf(stderr, "\r[%s] %8.1f / %.1f MB  %7.1f MB/s  ETA %4.0fs ", line, (double)done / 1e6, (double)total / 1e6, mbs, eta);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

/* Each quantized tensor's error, one line each (exact ones only with --verbose), then a summary
 * (printed at the end). */
static void report(void *ud, const char *name, int src, int dt, double nmse) {
    bar *b = ud;
    b->n++;
    if (nmse == 0) b->exact++;
    if (nmse >= b->worst) { b->worst = nmse; snprintf(b->worst_name, sizeof b->worst_name, "%s", name); }
    if (nmse == 0 && !b->verbose) return;
    printf("nmse %.3e  %s (%s -> %s)%s\n", nmse, name, src == G4_DT_CT_INT4 ? "w4a16" : g4_dtype_name(src), g4_dtype_name(dt),
           nmse == 0 ? "  exact" : "");
}

int cmd_shard(int argc, char **argv) {
    g4_mapfile_set_refolio(0); /* the checkpoint is read once, to be converted: never re-read from disk */
    g4_shard_opts o = {0};
    o.dtype = -1;
    long long tp = 0;
    int bad = 0, quiet = 0, verbose = 0, q4_auto = 1;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(help, stdout); return 0; }
        if (!strcmp(a, "--model")) { if (!(o.model_dir = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--out")) { if (!(o.out_dir = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--tp")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 4096, &tp)) bad = 1; }
        else if (!strcmp(a, "--dtype")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if ((o.dtype = g4_dtype_from_name(v)) < 0) { fprintf(stderr, "g4tp shard: unknown dtype \"%s\" (f32, bf16, f16, q8_0, q4_0)\n", v); bad = 1; }
        } else if (!strcmp(a, "--head-dtype")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (g4_dtype_from_name(v) < 0) { fprintf(stderr, "g4tp shard: unknown head dtype \"%s\" (f32, bf16, f16, q8_0, q4_0)\n", v); bad = 1; }
            else o.head_dtype = v;
        } else if (!strcmp(a, "--q4-layout")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (!strcmp(v, "auto")) q4_auto = 1;
            else if (!strcmp(v, "blocks")) { q4_auto = 0; o.q4_layout = G4_SHARD_Q4_BLOCKS; }
            else if (!strcmp(v, "grouped")) { q4_auto = 0; o.q4_layout = G4_SHARD_Q4_GROUPED; }
            else { fprintf(stderr, "g4tp shard: --q4-layout must be auto, blocks or grouped (got \"%s\")\n", v); bad = 1; }
        } else if (!strcmp(a, "--force")) o.force = 1;
        else if (!strcmp(a, "--no-vision")) o.no_vision = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--verbose")) verbose = 1;
        else { fprintf(stderr, "g4tp shard: unknown option %s (see --help)\n", a); bad = 1; }
    }
    if (bad) return 2;
    if (!o.model_dir || !o.out_dir || !tp) { fprintf(stderr, "g4tp shard: --model, --tp and --out are required (see --help)\n"); return 2; }
    o.tp = (int)tp;
    /* auto: the layout this machine's kernel set reads, so a reload maps it in place */
    if (q4_auto) o.q4_layout = g4_q4_0_layout_for(g4_kernels_get()) == G4_Q4_GROUPED ? G4_SHARD_Q4_GROUPED : G4_SHARD_Q4_BLOCKS;
    /* as the engine: G4_ROWPAR_PART_COLS=N parts of at most N columns, 0 none */
    const char *pc = getenv("G4_ROWPAR_PART_COLS");
    if (pc) o.rowpar_part_cols = atoll(pc) > 0 ? atoll(pc) : -1;
    /* as the engine: G4_Q4_TAIL=0 partial groups as blocks (a folder older builds read) */
    o.q4_tail_blocks = !g4_q4_0_tail_default();
    bar b = {.t0 = now_s(), .verbose = verbose};
    o.progress_ud = &b;
    o.report = report;
    if (!quiet && isatty(2)) o.progress = progress;
    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    o.cancel = &interrupted;
    g4_err err = {0};
    int rc = g4_artifact_shard(&o, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc) {
        if (o.progress) fputc('\n', stderr);
        cli_error("shard", &err);
        return rc == G4_ECANCELED ? 130 : 1;
    }
    if (b.n)
        printf("quantized %d tensors: %d exact (weights already on the grid), worst nmse %.3e (%s)\n", b.n, b.exact, b.worst, b.worst_name);
    return 0;
}
