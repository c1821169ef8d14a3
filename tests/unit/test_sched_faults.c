/* Failures inside the scheduler reach the client as errors, never as a shorter answer
 * (src/engine/scheduler.c, fault points of src/base/fault.h): a text event that cannot be queued,
 * a text that cannot be copied, a detokenizer error and a failed final flush each end the
 * request with an ERROR event after a prefix of the full answer (never a DONE); a request whose
 * end cannot be allocated is refused at submit. After each, the sequence's KV pages are free and
 * the next request gets the whole answer. Also the G4_FAULT syntax. */
#include <time.h>

#include "base/fault.h"
#include "sched_util.h"

static void test_fault_spec(void **state) {
    (void)state;
    assert_int_equal(g4_fault_set("a:2,b:1+"), G4_OK);
    assert_int_equal(g4_fault_hit("a"), 0);
    assert_int_equal(g4_fault_hit("b"), 1);
    assert_int_equal(g4_fault_hit("a"), 1);
    assert_int_equal(g4_fault_hit("a"), 0);
    assert_int_equal(g4_fault_hit("b"), 1);
    assert_int_equal(g4_fault_hit("c"), 0);
    assert_int_equal(g4_fault_set("a"), G4_EINVAL);
    assert_int_equal(g4_fault_set("a:0"), G4_EINVAL);
    assert_int_equal(g4_fault_set("a:x"), G4_EINVAL);
    assert_int_equal(g4_fault_set(":1"), G4_EINVAL);
    assert_int_equal(g4_fault_hit("a"), 0); /* a malformed setting arms nothing */
    assert_int_equal(g4_fault_set(NULL), G4_OK);
    assert_int_equal(g4_fault_hit("b"), 0);
}

typedef struct {
    g4_engine *e;
    g4_textgen tg;
    g4_sched *s;
    int32_t *ids;
    size_t n;
    g4_gen_params p;
} fixture;

static void fx_open(fixture *f) {
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = "models/demo", .max_seqs = 4, .max_batch = 64, .max_ctx = 256,
                        .kv_budget_bytes = 32 << 20};
    g4_err err = {0};
    if (g4_engine_open(&o, &f->e, &err)) fail_msg("%s", err.msg);
    if (g4_textgen_open(f->e, "models/demo", &f->tg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(g4_sched_create(&f->tg, NULL, &f->s, &err), 0);
    f->ids = tu_chat_ids(&f->tg, "What is the capital of France?", &f->n);
    f->p = (g4_gen_params){.max_new_tokens = 40, .skip_special = 1};
    g4_sampling_params_default(&f->p.sampling);
}

static void fx_close(fixture *f) {
    free(f->ids);
    g4_sched_free(f->s);
    g4_textgen_close(&f->tg);
    g4_engine_close(f->e);
}

/* One request to its end: its text, and the end event's kind (its code in *code). */
static char *ask(fixture *f, int *kind, int *code) {
    g4_sched_req *r;
    g4_err err = {0};
    if (g4_sched_submit(f->s, f->ids, f->n, &f->p, &r, &err)) fail_msg("submit: %s", err.msg);
    g4_sched_event end;
    char *text = tu_sched_collect(r, &end);
    *kind = end.kind;
    *code = end.code;
    if (end.kind == G4_EV_ERROR) print_message("  error: %s\n", end.text ? end.text : "(no message)");
    if (end.kind == G4_EV_ERROR) assert_true(end.text && end.len > 0); /* the message came (its buffer was made at submit) */
    g4_sched_event_clear(&end);
    g4_sched_req_free(r);
    return text;
}

static void wait_kv_free(g4_engine *e) {
    for (int i = 0; i < 500 && g4_engine_kv_bytes_used(e); i++) nanosleep(&(struct timespec){0, 10000000}, NULL);
    assert_int_equal(g4_engine_kv_bytes_used(e), 0);
}

static void test_failures_end_with_errors(void **state) {
    (void)state;
    fixture f;
    fx_open(&f);
    int kind, code;
    char *whole = ask(&f, &kind, &code);
    assert_int_equal(kind, G4_EV_DONE);
    print_message("the whole answer: \"%s\"\n", whole);
    assert_true(strlen(whole) > 8);
    static const char *points[] = {"sched.push:3", "sched.text:2", "sched.detok:4", "sched.flush:1", "sched.push:1+"};
    for (size_t i = 0; i < sizeof points / sizeof *points; i++) {
        print_message("G4_FAULT=%s\n", points[i]);
        assert_int_equal(g4_fault_set(points[i]), G4_OK);
        char *part = ask(&f, &kind, &code);
        assert_int_equal(g4_fault_set(NULL), G4_OK);
        if (kind != G4_EV_ERROR) fail_msg("%s: the request ended with %s and \"%s\", not with an error", points[i], kind == G4_EV_DONE ? "DONE" : "?", part);
        assert_int_equal(code, G4_ENOMEM);
        assert_true(strlen(part) <= strlen(whole));
        assert_memory_equal(part, whole, strlen(part)); /* what came is the answer's beginning */
        free(part);
        wait_kv_free(f.e);
        char *again = ask(&f, &kind, &code); /* the scheduler goes on */
        assert_int_equal(kind, G4_EV_DONE);
        assert_string_equal(again, whole);
        free(again);
    }
    /* the end of a request is made at submit: without it the request is refused there */
    assert_int_equal(g4_fault_set("sched.submit:1"), G4_OK);
    g4_sched_req *r;
    g4_err err = {0};
    assert_int_equal(g4_sched_submit(f.s, f.ids, f.n, &f.p, &r, &err), G4_ENOMEM);
    assert_int_equal(g4_fault_set(NULL), G4_OK);
    free(whole);
    fx_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_spec),
        cmocka_unit_test(test_failures_end_with_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
