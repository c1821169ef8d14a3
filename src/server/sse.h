/* sse.h — server-sent events for streamed generations: the byte buffer the HTTP side drains as
 * the socket accepts bytes, SSE framing (`[event: NAME\n]data: JSON\n\n`, `: comment` lines),
 * and per choice the output parser that splits generated text into reasoning, content and tool
 * calls. What the events say is the stream shape's (g4_sse_shape), which the caller passes in:
 * OpenAI's chunks (openai_sse.c), Anthropic's Messages events (anthropic.c), the Responses
 * events (responses.c). This file knows no API. */
#ifndef G4_SERVER_SSE_H
#define G4_SERVER_SSE_H

#include <jansson.h>
#include <stddef.h>

#include "server/errors.h"
#include "text/output_parser.h"

typedef struct g4_sse g4_sse;
typedef struct g4_sse_shape g4_sse_shape;

typedef struct g4_sse_opts {
    const g4_sse_shape *shape;/* what the events say (required) */
    int kind;                 /* the request's g4_api_kind, for shapes that serve several (OpenAI: chat or completions) */
    const char *id, *model;
    long long created;
    int include_usage;
    int parse_output;         /* split reasoning / content / tool calls (else the text goes to the shape as it is) */
    int start_in_thought;     /* the prompt ended inside a thought block */
    int n_choices;            /* 0 or 1: one */
    size_t prompt_tokens;     /* Anthropic's message_start tells it */
    const json_t *extra;      /* Responses: the request fields its response objects repeat */
} g4_sse_opts;

/* How a choice ended (g4_sse_finish_choice) and the totals (g4_sse_end). */
typedef struct g4_sse_end {
    const char *finish_reason;/* "stop", "length" */
    const char *stop_sequence;/* the stop string that matched, if one did */
    size_t prompt_tokens, completion_tokens, cached_tokens;
} g4_sse_end;

int g4_sse_create(const g4_sse_opts *o, g4_sse **out, g4_err *err);
void g4_sse_free(g4_sse *s);
/* A delta of generated text (special tokens kept when parsing) for choice 0. */
int g4_sse_feed(g4_sse *s, const char *text, size_t len, g4_err *err);
/* The same for choice i; logprobs (taken, may be NULL) go with the choice's next event, in the
 * shape's form (OpenAI chat: an array of logprobs.content entries, completions: an object of the
 * four lists); a shape without logprobs drops them. */
int g4_sse_feed_choice(g4_sse *s, int i, const char *text, size_t len, json_t *logprobs, g4_err *err);
/* End of choice i's generation: held-back text, the shape's end of the choice (end:
 * finish_reason, stop_sequence, token counts), logprobs as in feed. */
int g4_sse_finish_choice(g4_sse *s, int i, const g4_sse_end *end, json_t *logprobs, g4_err *err);
/* After every choice finished: the shape's end of the stream (usage, closing events) with these
 * totals and choice 0's finish reason and stop string. */
int g4_sse_end_stream(g4_sse *s, const g4_sse_end *totals, g4_err *err);
/* One choice: finish_choice(0) and end_stream with these counts. */
int g4_sse_finish(g4_sse *s, const char *finish_reason, size_t prompt_tokens, size_t completion_tokens, g4_err *err);
/* A failure after the stream started, in the shape's form; closes the stream. */
int g4_sse_error(g4_sse *s, const g4_api_err *ae);
/* An SSE comment line (": text"), ignored by clients; used as a keep-alive. */
int g4_sse_comment(g4_sse *s, const char *text);
/* Moves up to max pending bytes into buf; returns how many. */
size_t g4_sse_take(g4_sse *s, char *buf, size_t max);
size_t g4_sse_pending(const g4_sse *s);
/* 1 after the end or an error: nothing more will be added. */
int g4_sse_closed(const g4_sse *s);
/* How choice 0 ended as its API reports it (OpenAI: "tool_calls" when it had calls); NULL before. */
const char *g4_sse_finish_reason(const g4_sse *s);
void g4_sse_set_cached_tokens(g4_sse *s, size_t n);

/* A stream shape: state per stream (create gets the stream's options, whose id and model the
 * stream owns until it is freed), then for choice i its
 * first bytes (start, once, before anything else of the choice), its parsed events (events) or,
 * without output parsing, its text (text; NULL: given to events as content), logprobs that go
 * with its next event (logprobs; NULL: dropped), its end after the parser's last events
 * (finish; may be NULL), the end of the stream once every choice ended (end), a failure after
 * the start (error), and how choice i ended as the API reports it (finish_reason; NULL: the
 * finish reason given). max_choices: 0 any number, else at most that many. */
struct g4_sse_shape {
    int max_choices;
    void *(*create)(const g4_sse_opts *o);
    void (*free)(void *st);
    int (*start)(void *st, g4_sse *s, int i);
    int (*events)(void *st, g4_sse *s, int i, const g4_out_event *ev, size_t n);
    int (*text)(void *st, g4_sse *s, int i, const char *text, size_t len);
    void (*logprobs)(void *st, int i, json_t *lp);
    int (*finish)(void *st, g4_sse *s, int i, const g4_sse_end *end);
    int (*end)(void *st, g4_sse *s, const g4_sse_end *totals);
    int (*error)(void *st, g4_sse *s, const g4_api_err *ae);
    const char *(*finish_reason)(void *st, int i);
};

/* For the shapes: one event `[event: name\n]data: {data}\n\n` (name NULL: the data line alone;
 * takes the reference), raw bytes, and the options the stream was made with. */
int g4_sse_event(g4_sse *s, const char *name, json_t *data);
int g4_sse_write(g4_sse *s, const char *bytes, size_t n);
const g4_sse_opts *g4_sse_options(const g4_sse *s);

#endif
