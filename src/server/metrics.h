/* metrics.h — the server's counters and histograms, rendered in the Prometheus text format
 * (version 0.0.4) together with the scheduler's live numbers, under g4tp's names and again under
 * vLLM's (docs/server.md, "Metrics"). Thread-safe. */
#ifndef G4_SERVER_METRICS_H
#define G4_SERVER_METRICS_H

#include <stddef.h>

#include "engine/scheduler.h"

typedef struct g4_metrics g4_metrics;

g4_metrics *g4_metrics_create(void);
void g4_metrics_free(g4_metrics *m);
/* The served model's name: the model_name label of the vLLM-compatible series ("" at first). */
int g4_metrics_set_model(g4_metrics *m, const char *model);

/* One answered request: the route ("/v1/chat/completions", or "other") and the HTTP status. */
void g4_metrics_request(g4_metrics *m, const char *endpoint, int status);
void g4_metrics_ttft(g4_metrics *m, double seconds);
void g4_metrics_itl(g4_metrics *m, double seconds);
void g4_metrics_e2e(g4_metrics *m, double seconds);
/* A finished generation: its finish reason and token counts. */
void g4_metrics_finished(g4_metrics *m, const char *finish_reason, size_t prompt_tokens, size_t completion_tokens);

/* A request entered (+1) or left (-1) prompt preparation (chat template, tokenizer). */
void g4_metrics_preparing(g4_metrics *m, int delta);

/* The grammar cache's counts as of now (grammar/grammar.h), for the next render. */
void g4_metrics_grammars(g4_metrics *m, unsigned long long hits, unsigned long long misses, int entries);
/* A grammar compile began (+1) or ended (-1). */
void g4_metrics_compiling(g4_metrics *m, int delta);
/* A compile ended (a cache hit is none): its seconds, and the limit that stopped it ("" none;
 * "cancelled" when the client left or the server stops; else the limit's name, e.g. "memory"). */
void g4_metrics_compiled(g4_metrics *m, double seconds, const char *limit);

/* Images a request brought that went to the scheduler (n), and an image request refused before
 * that, by why: "no_vision", "too_many", "url", "format", "limit", "corrupt", "placeholders",
 * "busy" (anything else counts as "other"). */
void g4_metrics_images(g4_metrics *m, int n);
void g4_metrics_image_refused(g4_metrics *m, const char *why);

/* The exposition text (malloc'd); st may be NULL while the model loads. */
char *g4_metrics_render(g4_metrics *m, const g4_sched_stats *st, int ready, size_t *len);

#endif
