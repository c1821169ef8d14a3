/* generate.h — the generation routes (generate.c), called by the router (routes.c). Not for
 * use outside src/server. */
#ifndef G4_SERVER_GENERATE_H
#define G4_SERVER_GENERATE_H

#include "server/route_common.h"

/* One generation request in the route's API (ep->api). */
void g4_srv_generate(g4_server *s, g4_http_req *hr, const g4_srv_route *ep);
/* POST /v1/messages/count_tokens. */
void g4_srv_count_tokens(g4_server *s, g4_http_req *hr, const g4_srv_route *ep);

#endif
