/* grammar_cache.c — an LRU of compiled grammars keyed by the output spec's canonical text (see
 * grammar.h): agents send the same tools and schemas turn after turn, and a shared grammar keeps
 * its per-state mask cache warm (docs/structured-output.md, Speed). Few entries (tens), so a
 * linear scan with a last-use stamp is enough. */
#include "grammar/grammar.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;
    g4_grammar *g;
    uint64_t used;
} entry;

struct g4_grammar_cache {
    pthread_mutex_t mu;
    entry *e;
    int n, max;
    uint64_t clock, hits, misses;
};

int g4_grammar_cache_create(int max_entries, g4_grammar_cache **out, g4_err *err) {
    *out = NULL;
    if (max_entries < 1) return g4_err_set(err, G4_EINVAL, "a grammar cache needs at least one entry");
    g4_grammar_cache *c = calloc(1, sizeof *c);
    if (c) c->e = calloc((size_t)max_entries, sizeof *c->e);
    if (!c || !c->e) { free(c); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    c->max = max_entries;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return G4_OK;
}

void g4_grammar_cache_free(g4_grammar_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        g4_grammar_release(c->e[i].g);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->e);
    free(c);
}

/* Everything g4_output_compile reads, as compact JSON in the spec's own key order (a schema's
 * property order is the order of the generated object, so it is part of the key). */
static char *spec_key(const g4_output_spec *sp) {
    json_t *k = json_pack("{s:i,s:O?,s:s#,s:O?,s:O?,s:i,s:s?,s:i,s:i,s:i,s:i}", "format", (int)sp->format, "schema", sp->schema, "regex",
                          sp->regex ? sp->regex : "", sp->regex ? (int)sp->regex_len : 0, "choices", sp->choices, "tools", sp->tools,
                          "mode", (int)sp->tool_mode, "name", sp->tool_name, "parallel", sp->parallel_calls, "strict", sp->strict_calls,
                          "chat", sp->chat, "thought", (int)sp->thought);
    char *s = k ? json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : NULL;
    json_decref(k);
    return s;
}

int g4_output_compile_cached(g4_grammar_cache *c, const g4_output_spec *sp, const g4_grammar_limits *lim, g4_grammar_compile_stats *st,
                             g4_grammar **out, char *param, size_t pcap, g4_err *err) {
    *out = NULL;
    if (st) memset(st, 0, sizeof *st);
    if (!c || !g4_output_spec_constrains(sp)) return g4_output_compile_ex(sp, lim, st, out, param, pcap, err);
    char *key = spec_key(sp);
    if (!key) return g4_err_set(err, G4_ENOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) {
            c->e[i].used = ++c->clock;
            c->hits++;
            g4_grammar_retain(c->e[i].g);
            *out = c->e[i].g;
            break;
        }
    if (!*out) c->misses++;
    pthread_mutex_unlock(&c->mu);
    if (*out) {
        if (param && pcap) param[0] = 0;
        if (st) { st->cached = 1; st->states = g4_grammar_n_states(*out); }
        free(key);
        return G4_OK;
    }
    int rc = g4_output_compile_ex(sp, lim, st, out, param, pcap, err);
    if (rc || !*out) { free(key); return rc; }
    pthread_mutex_lock(&c->mu);
    int slot = -1, dup = 0;
    for (int i = 0; i < c->n && !dup; i++) dup = !strcmp(c->e[i].key, key); /* compiled meanwhile by another request */
    if (dup) free(key);
    else if (c->n < c->max) slot = c->n++;
    else { /* full: the least recently used goes */
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        free(c->e[slot].key);
        g4_grammar_release(c->e[slot].g);
    }
    if (slot >= 0) {
        g4_grammar_retain(*out);
        c->e[slot] = (entry){key, *out, ++c->clock};
    }
    pthread_mutex_unlock(&c->mu);
    return G4_OK;
}

void g4_grammar_cache_get_stats(g4_grammar_cache *c, g4_grammar_cache_stats *st) {
    memset(st, 0, sizeof *st);
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    st->hits = c->hits;
    st->misses = c->misses;
    st->entries = c->n;
    pthread_mutex_unlock(&c->mu);
}
