/* responses.h — OpenAI's Responses API as a translation (POST /v1/responses), stateless: a
 * body (input as a string or message / function_call / function_call_output items,
 * instructions, function tools) becomes the one internal request (openai.h), a finished
 * generation a response object (reasoning, message and function_call output items), a stream
 * the response.created … response.output_text.delta … response.completed events. Nothing is
 * stored: `store: true`, `previous_response_id` and `conversation` are refused with 400. Pure
 * JSON: no HTTP, no engine. */
#ifndef G4_SERVER_RESPONSES_H
#define G4_SERVER_RESPONSES_H

#include <jansson.h>
#include <stddef.h>

#include "server/openai.h"
#include "server/sse.h"

/* r->extra keeps the fields the response objects repeat (instructions, tools, tool_choice, …). */
int g4_resp_parse(const char *body, size_t len, g4_api_request *out, g4_api_err *ae);
/* The response object of a finished generation (r->parsed set; r->id "resp_…"). */
json_t *g4_resp_response(const g4_api_result *r, const json_t *extra);

extern const g4_sse_shape g4_resp_sse_shape;

#endif
