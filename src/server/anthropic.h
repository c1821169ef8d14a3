/* anthropic.h — Anthropic's Messages API as a translation (POST /v1/messages and
 * /v1/messages/count_tokens): a body becomes the one internal request (openai.h's
 * g4_api_request, whose `chat` is the OpenAI-style conversation the chat template renders),
 * a finished generation becomes a message object (thinking / text / tool_use blocks), and a
 * stream becomes message_start, content_block_start / _delta / _stop per block, message_delta
 * and message_stop. Errors use Anthropic's shape (errors.h). Pure JSON: no HTTP, no engine. */
#ifndef G4_SERVER_ANTHROPIC_H
#define G4_SERVER_ANTHROPIC_H

#include <jansson.h>
#include <stddef.h>

#include "server/openai.h"
#include "server/sse.h"

/* count_only: /v1/messages/count_tokens (no max_tokens, no sampling fields needed). */
int g4_anth_parse(const char *body, size_t len, int count_only, g4_api_request *out, g4_api_err *ae);
/* The anthropic-version header: absent, or a date YYYY-MM-DD from 2023-01-01 on. */
int g4_anth_check_version(const char *v, g4_api_err *ae);
/* The message object of a finished generation (r->parsed set; r->id "msg_…"). */
json_t *g4_anth_response(const g4_api_result *r);
/* "end_turn", "max_tokens", "stop_sequence" or "tool_use". */
const char *g4_anth_stop_reason(const char *finish_reason, const char *stop_sequence, size_t n_calls);

extern const g4_sse_shape g4_anth_sse_shape;

#endif
