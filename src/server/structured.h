/* structured.h — the grammar compile of one request's structured output (structured.c), within
 * the server's limits and budget, cancelled when the client leaves or the server stops. */
#ifndef G4_SERVER_STRUCTURED_H
#define G4_SERVER_STRUCTURED_H

#include "server/server_internal.h"

/* The grammar of what q asks of its output: compiled through the cache within the server's
 * limits, cancelled when the client leaves or the server stops, counted in /metrics. thought:
 * the prompt ends inside a thought block. *out NULL: free text. */
struct g4_grammar;
int g4_srv_compile_output(g4_server *s, g4_http_req *hr, const g4_api_request *q, int thought, struct g4_grammar **out, g4_api_err *ae);

#endif
