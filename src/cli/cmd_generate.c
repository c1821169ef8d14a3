/* cmd_generate.c — `g4tp generate`: greedy generation from token ids (no tokenizer), as one
 * request through the scheduler's loop (the server's), with its drafts when the engine has a
 * drafter. Prints the generated ids, or one JSON object with --json; the logits dumps come from
 * the request's token observer (g4_sched_sub_opts.on_token). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_images.h"
#include "engine/scheduler.h"

static const char *help =
    "usage: g4tp generate --prompt-ids 2,105,17 [--max-new-tokens N] [options]\n\n"
    "Greedy decoding (argmax, ties to the lowest id) from token ids.\n"
    "  --prompt-ids IDS        comma-separated prompt token ids (required)\n"
    "  --max-new-tokens N      tokens to generate (default 16)\n"
    "  --stop-ids IDS          stop after generating one of these ids (it is included)\n"
    "  --json                  print one JSON object: generated_ids, steps (top-5 per step), timing\n"
    "  --dump-logits FILE      write the logits at the prompt's last position (little-endian float32)\n"
    "  --dump-all-logits FILE  write the logits of every step, one vocab row after another\n"
    "  --image FILE            an image (PNG, JPEG, WebP; repeatable, in prompt order): each image\n"
    "                          placeholder id (the config's image_token_id) in the prompt becomes the\n"
    "                          image's block (boi, its soft tokens, eoi); prompt_ids in --json are the\n"
    "                          expanded ones\n"
    "  --speculative S         ngram[:N,K] or mtp:DIR[:K]: every round verifies up to K drafts in one\n"
    "                          step; the ids and every logit are the same bits as without it\n"
    "The prompt is computed in steps of --max-batch tokens. --max-new-tokens 0 computes nothing.\n"
    "%s";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void top5(const float *l, int64_t n, int32_t *ids, float *vals) {
    for (int k = 0; k < 5; k++) { ids[k] = -1; vals[k] = -INFINITY; }
    for (int64_t i = 0; i < n; i++) {
        float v = l[i];
        if (!(v > vals[4])) continue;
        int k = 4;
        while (k > 0 && v > vals[k - 1]) { vals[k] = vals[k - 1]; ids[k] = ids[k - 1]; k--; }
        vals[k] = v;
        ids[k] = (int32_t)i;
    }
}

static int write_all(FILE *f, const float *p, size_t n) { return fwrite(p, sizeof(float), n, f) == n; }

/* What each generated token produces: the dumps, the JSON step, the id (on the scheduler's
 * thread, while the main thread waits for the request's events). */
typedef struct {
    FILE *fd, *fa;
    const char *dump, *dump_all;
    json_t *steps;            /* NULL without --json */
    const int32_t *ids;
    int n_ids, n_gen, failed;
    int32_t *gen;
    int64_t V;
    double t0, t_first;
} out_ctx;

static int emit_step(void *u, int32_t id, const float *logits) {
    out_ctx *c = u;
    const int step = c->n_gen;
    if (step == 0) c->t_first = now_s() - c->t0;
    if (c->fd && step == 0 && !write_all(c->fd, logits, (size_t)c->V)) { fprintf(stderr, "g4tp generate: write error on %s\n", c->dump); return c->failed = 1; }
    if (c->fa && !write_all(c->fa, logits, (size_t)c->V)) { fprintf(stderr, "g4tp generate: write error on %s\n", c->dump_all); return c->failed = 1; }
    if (c->steps) {
        int32_t ti[5];
        float tv[5];
        top5(logits, c->V, ti, tv);
        json_t *st = json_object(), *a = json_array(), *b = json_array();
        for (int k = 0; k < 5 && k < c->V; k++) { json_array_append_new(a, json_integer(ti[k])); json_array_append_new(b, json_real(tv[k])); }
        json_object_set_new(st, "step", json_integer(step));
        json_object_set_new(st, "position", json_integer(c->n_ids - 1 + step));
        json_object_set_new(st, "input_id", json_integer(step == 0 ? c->ids[c->n_ids - 1] : c->gen[step - 1]));
        json_object_set_new(st, "top5_ids", a);
        json_object_set_new(st, "top5_values", b);
        json_object_set_new(st, "chosen_id", json_integer(id));
        json_array_append_new(c->steps, st);
    }
    c->gen[c->n_gen++] = id;
    return 0;
}

int cmd_generate(int argc, char **argv) {
    g4_engine_opts o = {0};
    o.threads = 1;
    const char *prompt = NULL, *stops = NULL, *dump = NULL, *dump_all = NULL, *images[CLI_MAX_IMAGES];
    int n_images = 0;
    long long max_new = 16;
    int json = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { printf(help, cli_engine_help); return 0; }
        if (cli_engine_flag(argc, argv, &i, &o, &bad)) continue;
        if (!strcmp(a, "--prompt-ids")) { if (!(prompt = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--stop-ids")) { if (!(stops = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--dump-logits")) { if (!(dump = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--dump-all-logits")) { if (!(dump_all = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--image")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (n_images == CLI_MAX_IMAGES) { fprintf(stderr, "g4tp generate: at most %d images\n", CLI_MAX_IMAGES); bad = 1; }
            else images[n_images++] = v;
        }
        else if (!strcmp(a, "--max-new-tokens")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 30, &max_new)) bad = 1; }
        else if (!strcmp(a, "--mutate")) { /* test-only: inject a spec mistake (see forward.h) */
            long long m;
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 16, &m)) bad = 1; else o.mutation = (int)m;
        } else { fprintf(stderr, "g4tp generate: unknown option %s (see --help)\n", a); bad = 1; }
    }
    if (bad) return 2;
    o.speculative_always = 1; /* with a drafter, every round drafts: the same steps and counts run to run */
    if (!prompt) { fprintf(stderr, "g4tp generate: --prompt-ids is required (see --help)\n"); return 2; }
    int32_t *ids = NULL, *stop = NULL;
    int n_ids = 0, n_stop = 0;
    if (!cli_ids("--prompt-ids", prompt, &ids, &n_ids)) return 2;
    if (n_ids == 0) { fprintf(stderr, "g4tp generate: --prompt-ids is empty\n"); free(ids); return 2; }
    if (stops && !cli_ids("--stop-ids", stops, &stop, &n_stop)) { free(ids); return 2; }
    if (!o.model_dir) o.model_dir = cli_default_model();

    g4_err err = {0};
    g4_engine *e = NULL;
    double t0 = now_s();
    if (g4_engine_open(&o, &e, &err)) { cli_error("generate", &err); free(ids); free(stop); return 1; }
    double t_load = now_s() - t0;
    if (g4_engine_rank(e) != 0) { /* MPI follower: serve rank 0 until it is done */
        int rc = g4_engine_follow(e, &err);
        if (rc) cli_error("generate", &err);
        g4_engine_close(e);
        free(ids); free(stop);
        return rc ? 1 : 0;
    }
    int rc = 0;
    const int64_t V = g4_engine_vocab(e);
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)(max_new + 1));
    json_t *steps = json_array();
    FILE *fd = NULL, *fa = NULL;
    g4_textgen tg = {.engine = e}; /* ids only: no tokenizer, no text */
    g4_sched *s = NULL;
    g4_sched_req *r = NULL;
    g4_sched_stats st = {0};
    cli_images ci = {0};
    g4_gen_params gp = {.max_new_tokens = max_new, .ignore_eos = 1, .stop_ids = stop, .n_stop_ids = (size_t)n_stop};
    if (!gen || !steps) { fprintf(stderr, "g4tp generate: out of memory\n"); rc = 1; goto done; }
    if (dump && !(fd = fopen(dump, "wb"))) { fprintf(stderr, "g4tp generate: cannot write %s\n", dump); rc = 1; goto done; }
    if (dump_all && !(fa = fopen(dump_all, "wb"))) { fprintf(stderr, "g4tp generate: cannot write %s\n", dump_all); rc = 1; goto done; }
    for (int i = 0; i < n_images; i++)
        if (!cli_images_add(&ci, g4_engine_model_dir(e), images[i], "generate")) { rc = 1; goto done; }
    size_t nz = (size_t)n_ids;
    if (!cli_images_attach(&ci, e, &ids, &nz, &gp, "generate")) { rc = 1; goto done; }
    n_ids = (int)nz;
    for (int i = 0; i < n_ids; i++)
        if (ids[i] >= V) { fprintf(stderr, "g4tp generate: prompt id %d is outside the vocabulary (0..%lld)\n", ids[i], (long long)V - 1); rc = 1; goto done; }
    out_ctx oc = {fd, fa, dump, dump_all, json ? steps : NULL, ids, n_ids, 0, 0, gen, V, now_s(), 0};
    const g4_spec_cfg *spec = g4_engine_spec(e);
    double t1 = now_s();
    if (max_new > 0) {
        const g4_sched_opts so = {.prefill_chunk = g4_engine_max_batch(e)};
        g4_sampling_params_default(&gp.sampling);
        const g4_sched_sub_opts x = {.on_token = emit_step, .on_token_user = &oc};
        if (g4_sched_create(&tg, &so, &s, &err) || g4_sched_submit_ex(s, ids, (size_t)n_ids, &gp, &x, &r, &err)) {
            cli_error("generate", &err);
            rc = 1;
            goto done;
        }
        g4_sched_event ev;
        while (!g4_sched_next(r, &ev, -1) || ev.kind == G4_EV_TEXT) g4_sched_event_clear(&ev);
        if (ev.kind == G4_EV_ERROR) {
            g4_err_set(&err, ev.code ? ev.code : G4_EINVAL, "%s", ev.text ? ev.text : "generation failed");
            cli_error("generate", &err);
            rc = 1;
        }
        g4_sched_event_clear(&ev);
        g4_sched_get_stats(s, &st);
        if (oc.failed || rc) { rc = 1; goto done; }
    }
    const double t_first = oc.t_first;
    const int n_gen = oc.n_gen;
    double t_total = now_s() - t1;
    if (json) {
        json_t *out = json_object(), *pa = json_array(), *ga = json_array();
        for (int i = 0; i < n_ids; i++) json_array_append_new(pa, json_integer(ids[i]));
        for (int i = 0; i < n_gen; i++) json_array_append_new(ga, json_integer(gen[i]));
        json_object_set_new(out, "prompt_ids", pa);
        json_object_set_new(out, "generated_ids", ga);
        json_object_set_new(out, "steps", steps);
        steps = NULL;
        json_object_set_new(out, "tp", json_integer(g4_engine_tp(e)));
        json_object_set_new(out, "isa", json_string(g4_engine_isa(e)));
        json_object_set_new(out, "load_s", json_real(t_load));
        json_object_set_new(out, "time_to_first_token_ms", json_real(t_first * 1e3));
        json_object_set_new(out, "total_s", json_real(t_total));
        if (spec->method != G4_SPEC_NONE)
            json_object_set_new(out, "speculative", json_pack("{s:s,s:I,s:I,s:I}", "method", spec->method == G4_SPEC_MTP ? "mtp" : "ngram", "steps",
                                                              (json_int_t)st.steps, "proposed", (json_int_t)st.draft_proposed, "accepted",
                                                              (json_int_t)st.draft_accepted));
        char *txt = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9));
        printf("%s\n", txt);
        free(txt);
        json_decref(out);
    } else {
        for (int i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
        printf("\n");
    }
done:
    if (fd && fclose(fd) != 0) rc = 1;
    if (fa && fclose(fa) != 0) rc = 1;
    json_decref(steps);
    g4_sched_req_free(r);
    g4_sched_free(s);
    g4_engine_close(e);
    cli_images_free(&ci);
    free(gen); free(ids); free(stop);
    return rc;
}
