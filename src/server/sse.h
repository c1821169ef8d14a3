/* sse.h — server-sent events for streamed generations: generated text deltas of one or more
 * choices become frames in the shape of the request's API. OpenAI (here): `data: {chunk}\n\n`
 * (chat.completion.chunk with content, reasoning_content and tool_calls deltas, or
 * text_completion), each choice's finish chunk, the usage chunk (stream_options.include_usage)
 * and `data: [DONE]`. Anthropic Messages and OpenAI Responses streams are named events
 * (`event: NAME\ndata: {json}\n\n`) whose shapes anthropic.c and responses.c own; this file
 * runs the output parser of each choice and buffers the bytes; the HTTP side takes them out
 * as the socket accepts them. */
#ifndef G4_SERVER_SSE_H
#define G4_SERVER_SSE_H

#include <stddef.h>

#include "server/openai.h"

typedef struct g4_sse g4_sse;

typedef struct g4_sse_opts {
    g4_api_kind kind;         /* G4_API_CHAT, G4_API_COMPLETIONS, G4_API_ANTHROPIC, G4_API_RESPONSES */
    const char *id, *model;
    long long created;
    int include_usage;
    int parse_output;         /* chat (and Anthropic, Responses): split reasoning / content / tool calls */
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
/* The same for choice i; logprobs (taken, may be NULL) go with the choice's next chunk: chat an
 * array of logprobs.content entries, completions an object of the four lists. */
int g4_sse_feed_choice(g4_sse *s, int i, const char *text, size_t len, json_t *logprobs, g4_err *err);
/* End of choice i's generation: held-back text, its finish chunk (end: finish_reason,
 * stop_sequence; completion_tokens for Anthropic and Responses), logprobs as in feed. */
int g4_sse_finish_choice(g4_sse *s, int i, const g4_sse_end *end, json_t *logprobs, g4_err *err);
/* After every choice finished: usage (OpenAI include_usage; Anthropic's message_delta and
 * message_stop; Responses' response.completed) and the end of the stream. */
int g4_sse_end_stream(g4_sse *s, const g4_sse_end *totals, g4_err *err);
/* One choice: finish_choice(0) and end_stream with these counts. */
int g4_sse_finish(g4_sse *s, const char *finish_reason, size_t prompt_tokens, size_t completion_tokens, g4_err *err);
/* A failure after the stream started, in the API's shape (OpenAI: `data: {"error": …}` then [DONE]). */
int g4_sse_error(g4_sse *s, const g4_api_err *ae);
/* An SSE comment line (": text"), ignored by clients; used as a keep-alive. */
int g4_sse_comment(g4_sse *s, const char *text);
/* Moves up to max pending bytes into buf; returns how many. */
size_t g4_sse_take(g4_sse *s, char *buf, size_t max);
size_t g4_sse_pending(const g4_sse *s);
/* 1 after the end or an error: nothing more will be added. */
int g4_sse_closed(const g4_sse *s);
/* The finish reason choice 0 reported ("tool_calls" when it had calls); NULL before. */
const char *g4_sse_finish_reason(const g4_sse *s);
void g4_sse_set_cached_tokens(g4_sse *s, size_t n);

/* A stream shape of named events (anthropic.c, responses.c): state per stream, the parsed events
 * of its one choice, and the end once the choice finished (end_stream's counts with the
 * choice's finish reason and stop string). */
typedef struct g4_sse_shape {
    void *(*create)(const g4_sse_opts *o);
    void (*free)(void *st);
    int (*start)(void *st, g4_sse *s);
    int (*events)(void *st, g4_sse *s, const g4_out_event *ev, size_t n);
    int (*finish)(void *st, g4_sse *s, const g4_sse_end *end);
    int (*error)(void *st, g4_sse *s, const g4_api_err *ae);
} g4_sse_shape;

/* For anthropic.c and responses.c: one named event `event: name\ndata: {data}` (takes the
 * reference), and the options the stream was made with. */
int g4_sse_event(g4_sse *s, const char *name, json_t *data);
const g4_sse_opts *g4_sse_options(const g4_sse *s);

#endif
