/* sched_util.h — test helpers for the scheduler on the demo model: a question through the chat
 * template into token ids, and a request's events read to its end. */
#ifndef G4_TEST_SCHED_UTIL_H
#define G4_TEST_SCHED_UTIL_H

#include "engine_util.h"
#include "engine/scheduler.h"
#include "engine/textgen.h"

static inline int32_t *tu_chat_ids(g4_textgen *tg, const char *q, size_t *n) {
    json_t *req = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", q, "add_generation_prompt", 1);
    char *text;
    size_t len;
    g4_err err;
    assert_int_equal(g4_textgen_render(tg, req, &text, &len, &err), 0);
    int32_t *ids;
    assert_int_equal(g4_tokenizer_encode(tg->tok, text, len, 0, &ids, n, &err), 0);
    free(text);
    json_decref(req);
    return ids;
}

/* A request's text until its end; *end gets the last event (DONE or ERROR; its text is the
 * error's message, the caller clears it). Fails the test when no event comes for 60 s. */
static inline char *tu_sched_collect(g4_sched_req *r, g4_sched_event *end) {
    char *out = calloc(1, 1);
    size_t len = 0;
    for (;;) {
        g4_sched_event ev;
        if (!g4_sched_next(r, &ev, 60000)) fail_msg("no event within 60 s");
        if (ev.kind != G4_EV_TEXT) {
            *end = ev;
            return out;
        }
        out = realloc(out, len + ev.len + 1);
        memcpy(out + len, ev.text, ev.len);
        len += ev.len;
        out[len] = 0;
        g4_sched_event_clear(&ev);
    }
}

#endif
