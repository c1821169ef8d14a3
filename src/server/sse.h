/* sse.h — server-sent events for streamed completions: turns generated text deltas into
 * `data: {chunk}\n\n` frames in the OpenAI chunk shapes (chat.completion.chunk with content,
 * reasoning_content and tool_calls deltas; text_completion), the final chunk with the finish
 * reason, the usage chunk (stream_options.include_usage) and `data: [DONE]`. Buffers the
 * frames; the HTTP side takes bytes out as the socket accepts them. */
#ifndef G4_SERVER_SSE_H
#define G4_SERVER_SSE_H

#include <stddef.h>

#include "server/openai.h"

typedef struct g4_sse g4_sse;

typedef struct g4_sse_opts {
    g4_api_kind kind;         /* G4_API_CHAT or G4_API_COMPLETIONS */
    const char *id, *model;
    long long created;
    int include_usage;
    int parse_output;         /* chat: split reasoning / content / tool calls */
    int start_in_thought;     /* the prompt ended inside a thought block */
} g4_sse_opts;

int g4_sse_create(const g4_sse_opts *o, g4_sse **out, g4_err *err);
void g4_sse_free(g4_sse *s);
/* A delta of generated text (special tokens kept for chat). */
int g4_sse_feed(g4_sse *s, const char *text, size_t len, g4_err *err);
/* Prompt tokens the prefix cache gave, for the usage chunk (0 unless set). */
void g4_sse_set_cached_tokens(g4_sse *s, size_t n);
/* End of generation: held-back text, the finish chunk, usage, [DONE]. */
int g4_sse_finish(g4_sse *s, const char *finish_reason, size_t prompt_tokens, size_t completion_tokens, g4_err *err);
/* A failure after the stream started: `data: {"error": …}` then [DONE]. */
int g4_sse_error(g4_sse *s, const g4_api_err *ae);
/* An SSE comment line (": text"), ignored by clients; used as a keep-alive. */
int g4_sse_comment(g4_sse *s, const char *text);
/* Moves up to max pending bytes into buf; returns how many. */
size_t g4_sse_take(g4_sse *s, char *buf, size_t max);
size_t g4_sse_pending(const g4_sse *s);
/* 1 after finish or error: nothing more will be added. */
int g4_sse_closed(const g4_sse *s);
/* The finish reason the stream reported ("tool_calls" when it had calls); NULL before. */
const char *g4_sse_finish_reason(const g4_sse *s);

#endif
