/* generate.h — the generation routes (generate.c), called by the router (routes.c). Not for
 * use outside src/server. */
#ifndef G4_SERVER_GENERATE_H
#define G4_SERVER_GENERATE_H

#include "server/server_internal.h"

/* One generation request in the API of kind. */
void g4_srv_generate(g4_server *s, g4_http_req *hr, const char *ep, g4_api_kind kind);
/* POST /v1/messages/count_tokens. */
void g4_srv_count_tokens(g4_server *s, g4_http_req *hr, const char *ep);

#endif
