/* grammar_cache.h — compiled output grammars shared across requests: agents send the same
 * tools and schemas turn after turn, and a shared grammar keeps its per-state mask cache warm
 * (docs/structured-output.md, Speed). Keyed by the whole output spec (format, schema and tools
 * in their own key order, which the generated text follows, tool mode, name, parallel / strict
 * calls, chat and thinking mode); least recently used entries go first. Refusals are not cached.
 * Thread-safe (one mutex; compiling happens outside it). */
#ifndef G4_GRAMMAR_GRAMMAR_CACHE_H
#define G4_GRAMMAR_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/constrain.h"
#include "grammar/json_schema.h"

typedef struct g4_grammar_cache g4_grammar_cache;

/* max_entries >= 1 (G4_EINVAL otherwise). */
int g4_grammar_cache_create(int max_entries, g4_grammar_cache **out, g4_err *err);
void g4_grammar_cache_free(g4_grammar_cache *c);
/* g4_output_compile through the cache (c NULL: no cache). *out is a new reference. */
int g4_output_compile_cached(g4_grammar_cache *c, const g4_output_spec *sp, g4_grammar **out, char *param, size_t param_cap, g4_err *err);

typedef struct {
    uint64_t hits, misses;
    int entries;
} g4_grammar_cache_stats;
void g4_grammar_cache_get_stats(g4_grammar_cache *c, g4_grammar_cache_stats *st);

#endif
