/* slots.h — llama-server's slot endpoints (slots.c): GET /slots, POST /slots/{id}?action=
 * save|restore|erase. Not for use outside src/server. */
#ifndef G4_SERVER_SLOTS_H
#define G4_SERVER_SLOTS_H

#include "server/route_common.h"

void g4_srv_slots_list(g4_server *s, g4_http_req *r, const g4_srv_route *ep);
void g4_srv_slot_action(g4_server *s, g4_http_req *r, const g4_srv_route *ep);

#endif
