/* cmd_bench.c — `g4tp bench`: prefill and decode speed of a model on this machine, next to the
 * machine's limits measured in the same process (a STREAM-triad-like bandwidth probe and the
 * fp32 FMA peak): decode as a fraction of the bandwidth bound (weight bytes read per token ÷
 * bandwidth), prefill as a fraction of the FLOP bound. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_spec.h"
#include "cli.h"
#include "kernels/probe.h"
#include "model/config.h"

static const char *help =
    "usage: g4tp bench [--model DIR] [--prompt-len P] [--gen G] [--json] [options]\n\n"
    "Measures load time, prefill tokens/s and time to first token for a P-token prompt (default\n"
    "512), decode tokens/s over G greedy tokens (default 32), peak RSS, and this machine's memory\n"
    "bandwidth (STREAM-triad-like), fp32 FMA peak and (AVX-512) int8 and bf16 dot-product peaks;\n"
    "prints decode and prefill as fractions of those bounds (prefill against the peak of the\n"
    "weights' own arithmetic: int8 for q8_0/q4_0, bf16 in --math fast, else fp32 FMA), and decode\n"
    "also against a read-only stream (decode reads, never writes).\n"
    "The probes stream a buffer of the weights' size, at most 4 x the last-level cache (a smaller\n"
    "one would measure the cache, not memory), and run after the engine is closed, on as many\n"
    "threads as all its ranks had. Decode is also given as the median step, and (threaded ranks,\n"
    "models over 256 MB) as the median of each step against a short bandwidth probe run right\n"
    "after it: on a shared host the bandwidth left to this machine changes from second to second.\n"
    "Each rank's decode time is split into its phases (q/k/v, attention, o_proj, gate/up,\n"
    "down_proj, the head, the all-reduces — mostly waiting for the slowest rank — and the rest),\n"
    "with the speed at which each matrix phase streamed its weights; and the prefill's time the\n"
    "same way, each matrix phase as a fraction of the prefill's peak (its rank's share of it).\n"
    "  --json        one JSON object with prefill_tok_s, decode_tok_s, ttft_ms, load_s, peak_rss_mb,\n"
    "                weight_bytes_per_token, bandwidth_gb_s, decode_bound_fraction,\n"
    "                fma_peak_gflops, prefill_bound_fraction, decode_median_tok_s,\n"
    "                decode_paired_bound_fraction (null when not measured), read_bandwidth_gb_s,\n"
    "                decode_read_bound_fraction, weights_copied_mb, probe_mb, llc_mb, weight_dtype,\n"
    "                int8_peak_gops, bf16_peak_gflops, prefill_peak_kind, prefill_peak_fraction,\n"
    "                weights_read_gb_s (a bare read of the weight pages themselves, threaded ranks),\n"
    "                decode_weights_read_fraction, decode_median_weights_read_fraction,\n"
    "                decode_phases (per rank: ms per token and weight GB/s of each phase),\n"
    "                prefill_phases (per rank: ms in all and GFLOP/s of each phase) and more\n"
    "  --prompt-kind random|repeat  the prompt: random ids (default), or a random passage given twice\n"
    "                (an input-grounded task: a model that repeats it is predictable from the prompt)\n"
    "  --step-curve N  also the median time of one forward step over t = 1..N tokens of one sequence\n"
    "                (every one with logits: a verification of t-1 drafts), against t = 1\n"
    "  --paired-read  after each decode step, a bare read of the weight pages themselves on the same\n"
    "                threads: each step's weight rate against the read of the same bytes at that moment\n"
    "                (the median, and the median in the steps whose read was above the middle: the fast\n"
    "                minutes of a shared host); threaded ranks only; json decode_paired_read_fraction,\n"
    "                decode_paired_read_fast_fraction, paired_read_gb_s (min, median, max),\n"
    "                paired_read_steps ([step ms, read GB/s] per step)\n"
    "  --streams LIST  also decode through the scheduler with each number of concurrent streams (e.g.\n"
    "                1,4), without and (with --speculative) with drafts: aggregate tok/s, tokens per\n"
    "                forward step, drafts verified and accepted\n"
    "%s";

/* A prefill phase's arithmetic rate on its rank, GFLOP/s (2 per weight multiply-add); 0 where it
 * has no weights or no time, and for the head (its logits are only the asking tokens'). */
static double prefill_phase_gflops(const g4_phase_times *t, int i) {
    if (i == G4_PHASE_HEAD || t->token_madds[i] <= 0 || t->prefill_seconds[i] <= 0) return 0;
    return 2 * t->token_madds[i] * (double)t->prefill_tokens / t->prefill_seconds[i] * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Peak RSS so far in kB (VmHWM), and a reset of it to the current RSS (Linux clear_refs 5): the
 * paired probe's buffer is the bench's, not the engine's, and must not count. 0 / -1 elsewhere. */
static long long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atoll(line + 6);
    if (f) fclose(f);
    return kb;
}
static int reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Median of v[0..n) (n >= 1); sorts v. */
static double median(double *v, long long n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Floating-point work of a forward over positions [p0, p0+n) of one sequence (multiply-adds
 * count 2): every matrix of every layer once per token, attention over the visible keys, and
 * the head for `heads` tokens. */
static double forward_flops(const g4_config *c, int64_t p0, int64_t n, int64_t heads) {
    double per_tok = 0, attn = 0;
    const double H = (double)c->hidden_size, I = (double)c->intermediate_size, NH = c->n_heads;
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_cfg *lc = &c->layers[l];
        double hd = lc->head_dim, kv = lc->n_kv;
        per_tok += 2 * H * (NH * hd + kv * hd * (lc->k_eq_v ? 1 : 2) + NH * hd) + 2 * 3 * H * I;
        for (int64_t p = p0; p < p0 + n; p++) {
            double keys = lc->full ? (double)(p + 1) : (double)(p + 1 < lc->window ? p + 1 : lc->window);
            attn += 2 * 2 * keys * hd * NH;
        }
    }
    return per_tok * (double)n + attn + 2.0 * H * (double)c->vocab_size * (double)heads;
}

int cmd_bench(int argc, char **argv) {
    g4_engine_opts o = {0};
    o.threads = 1;
    long long plen = 512, gen = 32, curve = 0;
    int json = 0, bad = 0, repeat = 0, n_streams = 0, paired_read = 0;
    int32_t *streams = NULL;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { printf(help, cli_engine_help); return 0; }
        if (cli_engine_flag(argc, argv, &i, &o, &bad)) continue;
        if (!strcmp(a, "--prompt-len")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 20, &plen)) bad = 1; }
        else if (!strcmp(a, "--gen")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 20, &gen)) bad = 1; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--paired-read")) paired_read = 1;
        else if (!strcmp(a, "--step-curve")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 64, &curve)) bad = 1; }
        else if (!strcmp(a, "--streams")) {
            free(streams);
            if (!(v = cli_value(argc, argv, &i)) || !cli_ids(a, v, &streams, &n_streams)) bad = 1;
            for (int k = 0; !bad && k < n_streams; k++)
                if (streams[k] < 1 || streams[k] > 64) { fprintf(stderr, "g4tp bench: --streams entries must be 1..64\n"); bad = 1; }
        }
        else if (!strcmp(a, "--prompt-kind")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (!strcmp(v, "repeat") || !strcmp(v, "random")) repeat = !strcmp(v, "repeat");
            else { fprintf(stderr, "g4tp bench: --prompt-kind must be random or repeat (got \"%s\")\n", v); bad = 1; }
        }
        else { fprintf(stderr, "g4tp bench: unknown option %s (see --help)\n", a); bad = 1; }
    }
    if (!bad && paired_read && o.comm && !strcmp(o.comm, "mpi")) {
        fprintf(stderr, "g4tp bench: --paired-read needs threaded ranks (--comm local): MPI ranks would compete with the read\n");
        bad = 1;
    }
    if (bad) { free(streams); return 2; }
    if (!o.model_dir) o.model_dir = cli_default_model();
    int max_streams = 1;
    for (int k = 0; k < n_streams; k++) max_streams = streams[k] > max_streams ? streams[k] : max_streams;
    if (o.max_seqs <= 0 && max_streams > 16) o.max_seqs = max_streams;
    if (o.max_batch <= 0) o.max_batch = plen < 512 ? (int)plen : 512;
    if (o.max_ctx <= 0) o.max_ctx = plen + gen + 5 * curve * (curve + 1) / 2 + 1;
    g4_err err = {0};
    g4_engine *e;
    double t0 = now_s();
    if (g4_engine_open(&o, &e, &err)) { cli_error("bench", &err); return 1; }
    double load_s = now_s() - t0;
    if (g4_engine_rank(e) != 0) {
        int rc = g4_engine_follow(e, &err);
        g4_engine_close(e);
        return rc ? 1 : 0;
    }
    const g4_config *cfg = g4_engine_config(e);
    const int64_t V = g4_engine_vocab(e);
    const int mb = g4_engine_max_batch(e);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)plen), *pos = malloc(sizeof(int32_t) * (size_t)mb), *sq = malloc(sizeof(int32_t) * (size_t)mb);
    uint8_t *want = malloc((size_t)mb);
    float *logits = malloc(sizeof(float) * (size_t)V);
    double *step_s = malloc(sizeof(double) * (size_t)gen), *pair_frac = NULL;
    double *pread_gbs = paired_read ? calloc((size_t)gen, sizeof(double)) : NULL, *pread_frac = paired_read ? calloc((size_t)gen, sizeof(double)) : NULL,
           *pread_step = paired_read ? calloc((size_t)gen, sizeof(double)) : NULL; /* unsorted, for the json */
    g4_bw_probe *pair = NULL;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (long long i = 0; i < plen; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; ids[i] = (int32_t)(3 + x % (uint64_t)(V - 3)); }
    for (long long i = (plen + 1) / 2; repeat && i < plen; i++) ids[i] = ids[i - (plen + 1) / 2]; /* the passage, again */
    int seq, rc = 0;
    /* warm-up: one untimed step touches every weight page once (mapping a file's pages costs
     * a fault per page on first use; that belongs to loading, not to decode speed) */
    double tw = now_s();
    for (int w = 0; w < 3; w++) {
        if (g4_engine_seq_open(e, 2, &seq, &err)) { cli_error("bench", &err); rc = 1; goto out; }
        int32_t p0 = 0;
        uint8_t one = 1;
        g4_batch b = {.n = 1, .ids = ids, .pos = &p0, .seq = &seq, .logits = &one};
        int r = g4_engine_forward(e, &b, logits, &err);
        g4_engine_seq_close(e, seq);
        if (r) { cli_error("bench", &err); rc = 1; goto out; }
    }
    double warm_s = now_s() - tw;
    if (g4_engine_seq_open(e, plen + gen, &seq, &err)) { cli_error("bench", &err); rc = 1; goto out; }
    g4_engine_phase_times_reset(e); /* the prefill's own, not the warm-up's */
    double t1 = now_s();
    for (long long s = 0; s < plen; s += mb) {
        int n = (int)(plen - s < mb ? plen - s : mb);
        for (int k = 0; k < n; k++) { pos[k] = (int32_t)(s + k); sq[k] = seq; want[k] = s + k == plen - 1; }
        g4_batch b = {.n = n, .ids = ids + s, .pos = pos, .seq = sq, .logits = want};
        if (g4_engine_forward(e, &b, logits, &err)) { cli_error("bench", &err); rc = 1; goto out; }
    }
    double t_prefill = now_s() - t1;
    int32_t id = g4_sample_greedy(logits, (int)V);
    double ttft = now_s() - t1;
    /* each rank's prefill phases, read before the decode's reset (a last prefill chunk of one
     * token is a one-token pass: it counts there, not here) */
    enum { MAX_PH = 16 };
    g4_phase_times pre[MAX_PH];
    memset(pre, 0, sizeof pre);
    for (int r = 0; r < g4_engine_tp(e) && r < MAX_PH; r++) {
        g4_err perr = {0};
        if (g4_engine_phase_times(e, r, &pre[r], &perr)) memset(&pre[r], 0, sizeof pre[r]);
    }
    g4_engine_phase_times_reset(e); /* the decode steps' own */
    /* Paired probe: right after each decode step, a short bandwidth probe (3 triad passes
     * over probe_bytes) on the same threads, so each step's speed is set against the bandwidth this
     * machine gave at that moment (neighbours on a shared host take a varying share). Only for
     * models well beyond the caches (the probe evicts them) and threaded ranks (MPI ranks would
     * compete with it). */
    const int is_mpi = o.comm && !strcmp(o.comm, "mpi");
    const int tp = g4_engine_tp(e), threads = tp * (o.threads > 0 ? o.threads : 1);
    const double wbytes = (double)g4_engine_weight_bytes(e);
    const double copied_mb = (double)g4_engine_copied_weight_bytes(e) / 1e6; /* held in memory, not mapped */
    /* the probes stream what a decode step streams: a buffer of the weights' size (a model the
     * caches hold is bounded by the caches), but no more than 4 x the last-level cache (beyond
     * that it is memory's bandwidth) */
    const size_t stream_cap = g4_probe_stream_bytes(), min_probe = (size_t)64 << 20;
    const size_t probe_bytes = wbytes > (double)stream_cap ? stream_cap : wbytes < (double)min_probe ? min_probe : (size_t)wbytes;
    const long long rss_before_pair_kb = peak_rss_kb();
    pair = !is_mpi && wbytes >= 256e6 ? g4_bw_probe_new(threads, probe_bytes) : NULL;
    pair_frac = pair ? calloc((size_t)gen, sizeof(double)) : NULL;
    double t_pairs = 0;
    double t2 = now_s();
    for (long long g = 0; g < gen; g++) {
        int32_t p = (int32_t)(plen + g);
        uint8_t one = 1;
        g4_batch b = {.n = 1, .ids = &id, .pos = &p, .seq = &seq, .logits = &one};
        double ts = now_s();
        if (g4_engine_forward(e, &b, logits, &err)) { cli_error("bench", &err); rc = 1; goto out; }
        id = g4_sample_greedy(logits, (int)V);
        step_s[g] = now_s() - ts;
        if (pread_gbs && pread_frac && pread_step && !is_mpi) {
            /* the same bytes, read bare right after the step: the ratio step by step is not moved
             * by the host's bandwidth changing over minutes */
            double tp0 = now_s();
            pread_gbs[g] = g4_engine_weight_read_gbs(e, threads, 1);
            pread_step[g] = step_s[g];
            pread_frac[g] = pread_gbs[g] > 0 ? wbytes / step_s[g] / (pread_gbs[g] * 1e9) : 0;
            t_pairs += now_s() - tp0;
        }
        if (pair && pair_frac) {
            double tp0 = now_s(), bw_now = g4_bw_probe_run(pair, 3);
            pair_frac[g] = bw_now > 0 ? wbytes / step_s[g] / (bw_now * 1e9) : 0;
            t_pairs += now_s() - tp0;
        }
    }
    double t_decode = now_s() - t2 - t_pairs;
    /* where each rank's decode time went (threaded ranks: all of them; MPI: this one) */
    g4_phase_times ph[MAX_PH];
    int ph_rank[MAX_PH], n_ph = 0;
    for (int r = 0; r < (is_mpi ? 1 : tp) && n_ph < MAX_PH; r++) {
        g4_err perr = {0};
        if (g4_engine_phase_times(e, r, &ph[n_ph], &perr) != G4_OK) continue;
        ph[n_ph].prefill_tokens = pre[r].prefill_tokens;
        memcpy(ph[n_ph].prefill_seconds, pre[r].prefill_seconds, sizeof pre[r].prefill_seconds);
        if (ph[n_ph].steps > 0 || ph[n_ph].prefill_tokens > 0) ph_rank[n_ph++] = r;
    }
    const double paired = pair && pair_frac ? median(pair_frac, gen) : -1;
    /* paired reads: the median fraction, and the median over the steps whose read was above the
     * middle read (the host's fast minutes, where the decode falls furthest behind) */
    double pread = -1, pread_fast = -1, pread_lo = 0, pread_mid = 0, pread_hi = 0;
    if (pread_gbs && pread_frac && pread_step && !is_mpi && pread_gbs[0] > 0) {
        double *tmp = malloc(sizeof(double) * (size_t)gen), *fast = malloc(sizeof(double) * (size_t)gen);
        if (tmp && fast) {
            memcpy(tmp, pread_gbs, sizeof(double) * (size_t)gen);
            pread_mid = median(tmp, gen);
            pread_lo = tmp[0];
            pread_hi = tmp[gen - 1];
            long long nf = 0;
            for (long long g = 0; g < gen; g++)
                if (pread_gbs[g] >= pread_mid) fast[nf++] = pread_frac[g];
            pread_fast = nf ? median(fast, nf) : -1;
            pread = median(pread_frac, gen);
        }
        free(tmp);
        free(fast);
    }
    /* the engine's peak: before the paired probe, and (the probe freed, the mark reset) after */
    int peak_exact = !pair;
    if (pair) {
        g4_bw_probe_free(pair);
        pair = NULL;
        peak_exact = rss_before_pair_kb > 0 && reset_peak_rss() == 0;
    }
    /* the median step: on a shared machine other tenants stretch some steps; the mean (decode_tok_s)
     * counts them, the median shows the engine */
    const double median_step = median(step_s, gen);
    g4_engine_seq_close(e, seq);
    /* the same bytes read bare: a read-only stream over the weight pages themselves (mapped or
     * held, their page size and page-cache state as the decode met them), on as many threads */
    const double wread = is_mpi ? -1 : g4_engine_weight_read_gbs(e, threads, 2);
    /* speculative decoding's measurements (bench_spec.h) */
    double *curve_s = curve ? calloc((size_t)curve + 1, sizeof(double)) : NULL;
    if (curve && bench_step_curve(e, ids, (int)plen, (int)curve, 5, curve_s, &err)) { cli_error("bench", &err); rc = 1; free(curve_s); goto out; }
    const int spec_on = g4_engine_spec(e)->method != G4_SPEC_NONE;
    bench_served served[2 * 16];
    int n_served = 0;
    for (int k = 0; k < n_streams && k < 16; k++)
        for (int on = 0; on <= spec_on; on++)
            if (bench_served_run(e, ids, (int)plen, (int)gen, streams[k], on, &served[n_served++], &err)) { cli_error("bench", &err); rc = 1; free(curve_s); goto out; }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long long peak_kb = peak_exact ? peak_rss_kb() : 0;
    if (!peak_exact || peak_kb <= 0) peak_kb = ru.ru_maxrss; /* the probe may be counted: at most probe_mb more */
    else if (rss_before_pair_kb > peak_kb) peak_kb = rss_before_pair_kb;
    /* The probes run after the engine is closed, with as many threads as all ranks had: while
     * it is open its pool threads (and MPI's progress loop on the other ranks) would compete with
     * the probe for the cores and understate the machine. All ranks on one host is the setup
     * this measures; across hosts it reports rank 0's host. */
    const char *isa = g4_engine_isa(e), *math = g4_engine_math(e), *wdt = g4_engine_weight_dtype(e);
    const double prefill_gflops = forward_flops(cfg, 0, plen, 1) / t_prefill / 1e9;
    char model_dir[1024];
    snprintf(model_dir, sizeof model_dir, "%s", g4_engine_model_dir(e));
    g4_engine_close(e);
    e = NULL;
    double bw = g4_probe_bandwidth_gbs(threads, probe_bytes), peak = g4_probe_fma_gflops_isa(isa, threads);
    /* the prefill's own bound: int8 products for q8_0/q4_0 (their matmuls quantize the
     * activations), bf16 products in fast math, else fp32 FMAs */
    const int quant = !strcmp(wdt, "q8_0") || !strcmp(wdt, "q4_0"), fastbf = !strcmp(wdt, "bf16") && !strcmp(math, "fast");
    const double int8_peak = strcmp(isa, "avx512") ? -1 : g4_probe_int8_gops(threads);
    const double bf16_peak = strcmp(isa, "avx512") ? -1 : g4_probe_bf16_gflops(threads);
    const char *pk_kind = quant && int8_peak > 0 ? "int8 dot product" : fastbf && bf16_peak > 0 ? "bf16 dot product" : "fp32 FMA";
    const double pk = quant && int8_peak > 0 ? int8_peak : fastbf && bf16_peak > 0 ? bf16_peak : peak;
    const double rd = g4_probe_read_gbs(threads, probe_bytes), rd_bytes_s = rd * 1e9; /* read-only stream */
    double prefill_tok_s = (double)plen / t_prefill, decode_tok_s = (double)gen / t_decode;
    double bound_tok_s = bw * 1e9 / wbytes;
    if (json) {
        json_t *j = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:s,s:i,s:i,s:I,s:I}",
                              "prefill_tok_s", prefill_tok_s, "decode_tok_s", decode_tok_s, "ttft_ms", ttft * 1e3, "load_s", load_s,
                              "peak_rss_mb", peak_kb / 1024.0, "weight_bytes_per_token", wbytes, "bandwidth_gb_s", bw,
                              "decode_bound_fraction", decode_tok_s / bound_tok_s, "fma_peak_gflops", peak,
                              "prefill_bound_fraction", prefill_gflops / peak, "prefill_gflops", prefill_gflops,
                              "decode_bound_tok_s", bound_tok_s, "decode_median_tok_s", 1.0 / median_step, "isa", isa, "tp", tp,
                              "threads", o.threads, "prompt_len", (json_int_t)plen, "gen", (json_int_t)gen);
        json_object_set_new(j, "warmup_s", json_real(warm_s));
        json_object_set_new(j, "weight_dtype", json_string(wdt));
        json_object_set_new(j, "int8_peak_gops", int8_peak > 0 ? json_real(int8_peak) : json_null());
        json_object_set_new(j, "bf16_peak_gflops", bf16_peak > 0 ? json_real(bf16_peak) : json_null());
        json_object_set_new(j, "prefill_peak_kind", json_string(pk_kind));
        json_object_set_new(j, "prefill_peak_fraction", json_real(prefill_gflops / pk));
        json_object_set_new(j, "weights_copied_mb", json_real(copied_mb));
        json_object_set_new(j, "probe_mb", json_real((double)probe_bytes / 1e6));
        json_object_set_new(j, "llc_mb", json_real((double)g4_probe_llc_bytes() / 1e6));
        json_object_set_new(j, "math", json_string(math));
        json_object_set_new(j, "decode_paired_bound_fraction", paired > 0 ? json_real(paired) : json_null());
        json_object_set_new(j, "decode_paired_read_fraction", pread > 0 ? json_real(pread) : json_null());
        json_object_set_new(j, "decode_paired_read_fast_fraction", pread_fast > 0 ? json_real(pread_fast) : json_null());
        json_object_set_new(j, "paired_read_gb_s", pread > 0 ? json_pack("[f,f,f]", pread_lo, pread_mid, pread_hi) : json_null());
        if (pread > 0) {
            json_t *a = json_array();
            for (long long g = 0; g < gen; g++) json_array_append_new(a, json_pack("[f,f]", pread_step[g] * 1e3, pread_gbs[g]));
            json_object_set_new(j, "paired_read_steps", a);
        }
        json_object_set_new(j, "read_bandwidth_gb_s", rd > 0 ? json_real(rd) : json_null());
        json_object_set_new(j, "decode_read_bound_fraction", rd > 0 ? json_real(decode_tok_s * wbytes / rd_bytes_s) : json_null());
        json_object_set_new(j, "weights_read_gb_s", wread > 0 ? json_real(wread) : json_null());
        json_object_set_new(j, "decode_weights_read_fraction", wread > 0 ? json_real(decode_tok_s * wbytes / (wread * 1e9)) : json_null());
        json_object_set_new(j, "decode_median_weights_read_fraction", wread > 0 ? json_real(wbytes / median_step / (wread * 1e9)) : json_null());
        if (n_ph) {
            json_t *a = json_array();
            for (int k = 0; k < n_ph; k++) {
                if (!ph[k].steps) continue;
                json_t *ms = json_object(), *gbs = json_object();
                for (int i = 0; i < G4_PHASE_COUNT; i++) {
                    const double sec = ph[k].seconds[i] / (double)ph[k].steps;
                    json_object_set_new(ms, g4_phase_name(i), json_real(sec * 1e3));
                    if (ph[k].step_bytes[i] > 0 && sec > 0) json_object_set_new(gbs, g4_phase_name(i), json_real(ph[k].step_bytes[i] / sec * 1e-9));
                }
                json_array_append_new(a, json_pack("{s:i,s:I,s:o,s:o}", "rank", ph_rank[k], "steps", (json_int_t)ph[k].steps, "ms_per_token", ms,
                                                   "weights_gb_s", gbs));
            }
            json_object_set_new(j, "decode_phases", a);
            a = json_array();
            for (int k = 0; k < n_ph; k++) {
                json_t *ms = json_object(), *gf = json_object();
                for (int i = 0; i < G4_PHASE_COUNT; i++) {
                    const double sec = ph[k].prefill_seconds[i], g = prefill_phase_gflops(&ph[k], i);
                    json_object_set_new(ms, g4_phase_name(i), json_real(sec * 1e3));
                    if (g > 0) json_object_set_new(gf, g4_phase_name(i), json_real(g));
                }
                json_array_append_new(a, json_pack("{s:i,s:I,s:o,s:o}", "rank", ph_rank[k], "tokens", (json_int_t)ph[k].prefill_tokens, "ms", ms,
                                                   "gflops", gf));
            }
            json_object_set_new(j, "prefill_phases", a);
        }
        if (curve) {
            json_t *c = json_array();
            for (int t = 1; t <= curve && curve_s[t] > 0; t++) json_array_append_new(c, json_pack("{s:i,s:f,s:f}", "tokens", t, "step_ms", curve_s[t] * 1e3, "vs_one", curve_s[t] / curve_s[1]));
            json_object_set_new(j, "step_curve", c);
        }
        if (n_served) {
            json_t *a = json_array();
            for (int k = 0; k < n_served; k++) {
                const bench_served *b = &served[k];
                json_array_append_new(a, json_pack("{s:i,s:b,s:f,s:f,s:I,s:I,s:I,s:I,s:o}", "streams", b->streams, "speculative", b->spec, "decode_tok_s",
                                                   b->decode_tok_s, "tokens_per_step", b->tokens_per_step, "drafts", (json_int_t)b->proposed, "accepted",
                                                   (json_int_t)b->accepted, "spec_steps", (json_int_t)b->spec_steps, "steps", (json_int_t)b->steps,
                                                   "acceptance_rate", b->proposed ? json_real((double)b->accepted / (double)b->proposed) : json_null()));
            }
            json_object_set_new(j, "served", a);
        }
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("model        %s (%s, %s math, TP %d x %d threads)\n", model_dir, isa, math, tp, o.threads);
        printf("load         %.2f s (+ %.2f s first touch of the weights), peak RSS %.0f MB; %.0f MB of weights copied or converted\n", load_s, warm_s,
               peak_kb / 1024.0, copied_mb);
        printf("prefill      %lld tokens: %.1f tok/s, %.1f GFLOP/s = %.0f %% of the fp32 FMA peak (%.1f GFLOP/s); TTFT %.1f ms\n",
               plen, prefill_tok_s, prefill_gflops, 100 * prefill_gflops / peak, peak, ttft * 1e3);
        if (pk != peak)
            printf("             %s weights: %.0f %% of the %s peak (%.1f G/s)\n", wdt, 100 * prefill_gflops / pk, pk_kind, pk);
        printf("decode       %lld tokens: %.2f tok/s = %.0f %% of the bandwidth bound (%.2f tok/s: %.1f MB of weights per token at %.1f GB/s,\n"
               "             a triad over %.0f MB; last-level cache %.0f MB)\n",
               gen, decode_tok_s, 100 * decode_tok_s / bound_tok_s, bound_tok_s, wbytes / 1e6, bw, (double)probe_bytes / 1e6,
               (double)g4_probe_llc_bytes() / 1e6);
        printf("             median step %.1f ms = %.2f tok/s = %.0f %% of the bound\n", median_step * 1e3, 1.0 / median_step,
               100 / median_step / bound_tok_s);
        if (paired > 0)
            printf("             median of each step against a bandwidth probe right after it: %.0f %% of the bound\n", 100 * paired);
        if (pread > 0)
            printf("             each step against a bare read of its weights right after it (%.1f-%.1f-%.1f GB/s): %.0f %% median,\n"
                   "             %.0f %% median of the steps with the faster half of the reads\n",
                   pread_lo, pread_mid, pread_hi, 100 * pread, 100 * pread_fast);
        if (rd > 0)
            printf("             against a read-only stream (%.1f GB/s; decode only reads): %.0f %% mean, %.0f %% median step\n",
                   rd, 100 * decode_tok_s * wbytes / rd_bytes_s, 100 * wbytes / median_step / rd_bytes_s);
        if (wread > 0)
            printf("             against a bare read of the weight pages themselves (%.1f GB/s): %.0f %% mean, %.0f %% median step\n", wread,
                   100 * decode_tok_s * wbytes / (wread * 1e9), 100 * wbytes / median_step / (wread * 1e9));
        for (int k = 0; k < n_ph; k++) {
            double tot = 0;
            if (!ph[k].steps) continue;
            for (int i = 0; i < G4_PHASE_COUNT; i++) tot += ph[k].seconds[i];
            printf("%s rank %d, ms per token (GB/s of its weights):", k ? "            " : "phases      ", ph_rank[k]);
            for (int i = 0; i < G4_PHASE_COUNT; i++) {
                const double sec = ph[k].seconds[i] / (double)ph[k].steps;
                printf(" %s %.3g", g4_phase_name(i), sec * 1e3);
                if (ph[k].step_bytes[i] > 0 && sec > 0) printf(" (%.1f)", ph[k].step_bytes[i] / sec * 1e-9);
                else if (i == G4_PHASE_ALLREDUCE && tot > 0) printf(" (%.0f %%)", 100 * ph[k].seconds[i] / tot);
                printf(i + 1 < G4_PHASE_COUNT ? "," : "\n");
            }
        }
        for (int k = 0; k < n_ph; k++) {
            double tot = 0;
            for (int i = 0; i < G4_PHASE_COUNT; i++) tot += ph[k].prefill_seconds[i];
            if (!ph[k].prefill_tokens || tot <= 0) continue;
            printf("%s rank %d, ms in all (%% of the %s peak):", k ? "            " : "prefill by  ", ph_rank[k], pk_kind);
            for (int i = 0; i < G4_PHASE_COUNT; i++) {
                const double g = prefill_phase_gflops(&ph[k], i) * tp; /* against its share of the peak */
                printf(" %s %.4g", g4_phase_name(i), ph[k].prefill_seconds[i] * 1e3);
                if (g > 0) printf(" (%.0f %%)", 100 * g / pk);
                else if (i == G4_PHASE_ALLREDUCE) printf(" (%.0f %%)", 100 * ph[k].prefill_seconds[i] / tot);
                printf(i + 1 < G4_PHASE_COUNT ? "," : "\n");
            }
        }
        for (int t = 1; t <= curve && curve_s[t] > 0; t++)
            printf("%s %2d tokens of one sequence: %.2f ms = %.2f x one token\n", t == 1 ? "step cost   " : "            ", t, curve_s[t] * 1e3,
                   curve_s[t] / curve_s[1]);
        for (int k = 0; k < n_served; k++) {
            const bench_served *b = &served[k];
            printf("%s %2d stream%s, %s: %.2f tok/s, %.2f tokens per forward step", k == 0 ? "served      " : "            ", b->streams,
                   b->streams == 1 ? " " : "s", b->spec ? "speculative" : "plain      ", b->decode_tok_s, b->tokens_per_step);
            if (b->spec) printf(", %llu drafts, %.0f %% accepted, drafts in %llu of %llu steps", (unsigned long long)b->proposed,
                                b->proposed ? 100.0 * (double)b->accepted / (double)b->proposed : 0.0, (unsigned long long)b->spec_steps,
                                (unsigned long long)b->steps);
            printf("\n");
        }
    }
    free(curve_s);
out:
    free(ids); free(pos); free(sq); free(want); free(logits); free(step_s); free(pair_frac); free(pread_gbs); free(pread_frac); free(pread_step); free(streams);
    g4_bw_probe_free(pair);
    if (e) g4_engine_close(e);
    return rc;
}
