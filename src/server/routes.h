/* routes.h — the HTTP handler (routes.c) the server's listener calls for every request. Not for
 * use outside src/server. */
#ifndef G4_SERVER_ROUTES_H
#define G4_SERVER_ROUTES_H

#include "server/http.h"

/* user: the g4_server. */
void g4_srv_handle(void *user, g4_http_req *req);

#endif
