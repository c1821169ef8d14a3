/* slots.c — llama-server's slot endpoints, mapped onto g4tp (docs/server.md, "Slots"):
 * GET /slots lists the engine's sequence slots; POST /slots/{id}?action=save writes the prefix
 * (tokens and KV) of the last request that ran in slot id to a file in --slot-save-path,
 * action=restore reads such a file into the prefix cache (the next request sharing the prefix
 * takes it from there), action=erase forgets what the slot last held. g4tp has no sticky
 * slots: a request runs in whichever slot is free, and every slot shares one prefix cache.
 * The engine work runs on the scheduler's thread between two steps (g4_sched_run_job). */
#include "server/slots.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/kvfile.h"
#include "server/errors.h"

enum { A_SAVE = 1, A_RESTORE, A_ERASE, A_LIST };

typedef struct {
    int action, slot;
    char stem[4200];
    int64_t n, n_tok;
    g4_err err;
    json_t *list;
} slot_job;

static int run_job(g4_engine *e, void *arg) {
    slot_job *j = arg;
    int rc = G4_OK;
    const int32_t *tok;
    switch (j->action) {
    case A_SAVE:
        tok = g4_engine_seq_last(e, j->slot, &j->n_tok);
        if (!tok) return g4_err_set(&j->err, G4_ENOTFOUND, "slot %d holds no finished request to save", j->slot);
        return g4_engine_kv_save_from(e, j->stem, tok, j->n_tok, g4_engine_seq_last_hint(e, j->slot), &j->n, &j->err);
    case A_RESTORE: return g4_engine_kv_load(e, j->stem, &j->n, &j->n_tok, &j->err);
    case A_ERASE: g4_engine_seq_forget(e, j->slot, &j->n); return G4_OK;
    case A_LIST:
        j->list = json_array();
        for (int i = 0; i < g4_engine_max_seqs(e); i++) {
            int64_t last;
            g4_engine_seq_last(e, i, &last);
            const int64_t len = g4_engine_seq_len(e, i);
            json_array_append_new(j->list, json_pack("{s:i,s:I,s:b,s:I,s:I}", "id", i, "n_ctx", (json_int_t)g4_engine_max_ctx(e), "is_processing",
                                                     g4_engine_seq_open_now(e, i), "n_tokens", (json_int_t)len, "n_tokens_last", (json_int_t)last));
        }
        return rc;
    }
    return g4_err_set(&j->err, G4_EINVAL, "unknown slot action");
}

/* A file name in --slot-save-path: letters, digits, '.', '_', '-'; not hidden, no path. */
static int filename_ok(const char *f) {
    size_t n = f ? strlen(f) : 0;
    if (n == 0 || n > 200 || f[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = f[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return 0;
    }
    return 1;
}

/* Bytes of the entry's files in this process's folder. */
static uint64_t entry_bytes(const char *stem, int tp) {
    uint64_t b = 0;
    char p[4400];
    struct stat st;
    snprintf(p, sizeof p, "%s" G4_KVFILE_META_EXT, stem);
    if (stat(p, &st) == 0) b += (uint64_t)st.st_size;
    for (int r = 0; r < tp; r++) {
        g4_kvfile_rank_path(p, sizeof p, stem, r, tp);
        if (stat(p, &st) == 0) b += (uint64_t)st.st_size;
    }
    return b;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void g4_srv_slots_list(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
    slot_job j = {.action = A_LIST};
    g4_api_err ae;
    const int rc = g4_sched_run_job(s->sched, run_job, &j);
    if (rc || !j.list) {
        json_decref(j.list);
        g4_api_err_status(&ae, rc ? rc : G4_ENOMEM, NULL, "%s", rc == G4_ECANCELED ? "the server is shutting down" : "out of memory");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    g4_srv_answer_json(s, r, ep, 200, j.list);
}

void g4_srv_slot_action(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
    g4_api_err ae;
    const char *path = g4_http_path(r), *act = g4_http_query(r, "action");
    char *end;
    errno = 0;
    const long id = strtol(path + strlen("/slots/"), &end, 10);
    const int max = g4_engine_max_seqs(s->e);
    slot_job j = {0};
    j.action = !act ? 0 : !strcmp(act, "save") ? A_SAVE : !strcmp(act, "restore") ? A_RESTORE : !strcmp(act, "erase") ? A_ERASE : 0;
    json_t *o = NULL;
    int rc = 0;
    if (errno || *end || end == path + strlen("/slots/") || id < 0 || id >= max)
        rc = g4_api_err_status(&ae, G4_EINVAL, "id_slot", "no slot \"%.40s\": slots are 0..%d", path + strlen("/slots/"), max - 1);
    else if (!j.action) rc = g4_api_err_status(&ae, G4_EINVAL, "action", "?action= must be save, restore or erase");
    else if (j.action != A_ERASE && !(s->o.slot_save_path && *s->o.slot_save_path)) {
        rc = g4_api_err_status(&ae, G4_EUNSUPPORTED, NULL, "saving and restoring slots is off: start the server with --slot-save-path DIR");
        ae.status = 501;
        ae.type = "not_supported_error";
    }
    const char *fname = NULL;
    if (!rc && j.action != A_ERASE) {
        size_t len;
        const char *body = g4_http_body(r, &len);
        if (g4_api_parse_object(body, len, &o, &ae)) rc = 1;
        else {
            json_t *f = json_object_get(o, "filename");
            fname = json_string_value(f);
            if (!json_is_string(f) || !filename_ok(fname) || strlen(fname) != json_string_length(f))
                rc = g4_api_err_status(&ae, G4_EINVAL, "filename",
                                       "'filename' must be a plain file name in --slot-save-path (letters, digits, '.', '_', '-'; not starting with '.')");
        }
    }
    if (rc) {
        json_decref(o);
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    j.slot = (int)id;
    if (fname) snprintf(j.stem, sizeof j.stem, "%s/%s", s->o.slot_save_path, fname);
    const double t0 = now_ms();
    rc = g4_sched_run_job(s->sched, run_job, &j);
    const double ms = now_ms() - t0;
    json_t *ans = NULL;
    if (rc == G4_OK && j.action == A_SAVE)
        ans = json_pack("{s:i,s:s,s:I,s:I,s:{s:f}}", "id_slot", j.slot, "filename", fname, "n_saved", (json_int_t)j.n, "n_written",
                        (json_int_t)entry_bytes(j.stem, g4_engine_tp(s->e)), "timings", "save_ms", ms);
    else if (rc == G4_OK && j.action == A_RESTORE)
        ans = json_pack("{s:i,s:s,s:I,s:I,s:{s:f}}", "id_slot", j.slot, "filename", fname, "n_restored", (json_int_t)j.n, "n_read",
                        (json_int_t)entry_bytes(j.stem, g4_engine_tp(s->e)), "timings", "restore_ms", ms);
    else if (rc == G4_OK) ans = json_pack("{s:i,s:I}", "id_slot", j.slot, "n_erased", (json_int_t)j.n);
    json_decref(o);
    if (ans) { g4_srv_answer_json(s, r, ep, 200, ans); return; }
    if (rc == G4_ECANCELED) g4_api_err_status(&ae, rc, NULL, "the server is shutting down");
    else g4_api_err_from(&ae, &j.err, j.err.code == G4_ENOTFOUND || j.err.code == G4_EIO ? "filename" : NULL);
    if (j.err.code == G4_EIO && j.action == A_RESTORE) ae.status = 404; /* no such file */
    g4_srv_answer_error(s, r, ep, &ae);
}
