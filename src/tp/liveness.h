/* liveness.h — knowing at once that another rank's process has ended, without asking MPI.
 *
 * OpenMPI 4 reports a peer that hung up from inside its TCP transport and then waits for the
 * launcher, which is busy ending the job; a rank blocked there can tell nobody anything. So each
 * follower also holds one plain TCP connection to rank 0: rank 0 listens on an ephemeral port,
 * its addresses, the port and a random token go to the others through MPI at startup, and a
 * watcher thread on each side polls the connection. End of file or an error (the kernel closes
 * a killed process's sockets; keepalive probes give up on a dead host within ~15 s) marks the
 * other side gone; comm_mpi's waits look at g4_live_gone() between polls. One per process. */
#ifndef G4_TP_LIVENESS_H
#define G4_TP_LIVENESS_H

#include <stdint.h>

#include "base/error.h"

#define G4_LIVE_MAX_ADDRS 8

typedef struct g4_live_addr {
    uint32_t ip[G4_LIVE_MAX_ADDRS]; /* IPv4, network order; loopback last */
    int32_t n_ip, port;
    uint64_t token;
} g4_live_addr;

/* Rank 0: listen on every address, fill *a (to be sent to the others). */
int g4_live_listen(g4_live_addr *a, g4_err *err);
/* Rank 0: accept the n_peers followers' connections (each sends its token and rank) for up to
 * timeout_s; returns how many connected. Starts the watcher. */
int g4_live_accept(int n_peers, double timeout_s);
/* A follower: connect to rank 0 (the first address that answers) and start the watcher. */
int g4_live_connect(const g4_live_addr *a, int rank, double timeout_s, g4_err *err);
/* -1 while every watched peer is there; else the rank whose connection ended first. */
int g4_live_gone(void);
/* Stops the watcher and closes the connections (a clean exit: followers see an end of file). */
void g4_live_stop(void);

#endif
