/* liveness.c — see liveness.h. Plain sockets and one poll() thread; nothing here knows MPI. */
#include "tp/liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PEERS 64

static struct {
    int listen_fd, n;
    int fd[MAX_PEERS], rank[MAX_PEERS];
    int wake[2];
    uint64_t token;
    pthread_t thread;
    int running;
} L = {.listen_fd = -1, .wake = {-1, -1}};
static atomic_int gone = -1;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* keepalive: a host that vanished without closing (power, cable) is noticed in ~15 s */
static void keepalive(int fd) {
    int on = 1, idle = 5, intvl = 2, cnt = 5;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static void *watch(void *arg) {
    (void)arg;
    struct pollfd p[MAX_PEERS + 1];
    for (;;) {
        int k = 0;
        for (int i = 0; i < L.n; i++)
            if (L.fd[i] >= 0) p[k++] = (struct pollfd){L.fd[i], POLLIN, 0};
        p[k++] = (struct pollfd){L.wake[0], POLLIN, 0};
        if (poll(p, (nfds_t)k, -1) < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        if (p[k - 1].revents) return NULL; /* g4_live_stop */
        for (int i = 0, j = 0; i < L.n; i++) {
            if (L.fd[i] < 0) continue;
            if (p[j++].revents) {
                char b[64];
                ssize_t r = recv(L.fd[i], b, sizeof b, MSG_DONTWAIT);
                if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) continue; /* nobody writes; ignore */
                int none = -1;
                atomic_compare_exchange_strong(&gone, &none, L.rank[i]);
                close(L.fd[i]);
                L.fd[i] = -1;
            }
        }
    }
}

static int start_watch(void) {
    if (pipe(L.wake) != 0) return -1;
    if (pthread_create(&L.thread, NULL, watch, NULL) != 0) return -1;
    L.running = 1;
    return 0;
}

int g4_live_listen(g4_live_addr *a, g4_err *err) {
    memset(a, 0, sizeof *a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = 0};
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, MAX_PEERS) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return g4_err_set(err, G4_EIO, "liveness socket: %s", strerror(e));
    }
    L.listen_fd = fd;
    a->port = ntohs(sa.sin_port);
    struct ifaddrs *ifs = NULL, *i;
    uint32_t lo = 0;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            uint32_t ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            if ((ntohl(ip) >> 24) == 127) lo = ip;
            else if (a->n_ip < G4_LIVE_MAX_ADDRS - 1) a->ip[a->n_ip++] = ip;
        }
        freeifaddrs(ifs);
    }
    a->ip[a->n_ip++] = lo ? lo : htonl(INADDR_LOOPBACK);
    /* the token only tells our own followers from strangers on the port */
    uint64_t t = 0;
    int ur = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (ur < 0 || read(ur, &t, sizeof t) != (ssize_t)sizeof t) t = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(now_s() * 1e9);
    if (ur >= 0) close(ur);
    a->token = L.token = t;
    return G4_OK;
}

int g4_live_accept(int n_peers, double timeout_s) {
    double end = now_s() + timeout_s;
    while (L.n < n_peers && L.n < MAX_PEERS) {
        int ms = (int)((end - now_s()) * 1000);
        struct pollfd p = {L.listen_fd, POLLIN, 0};
        if (ms <= 0 || poll(&p, 1, ms) <= 0) break;
        int fd = accept4(L.listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        struct { uint64_t token; int32_t rank, pad; } hello;
        struct pollfd q = {fd, POLLIN, 0};
        if (poll(&q, 1, 2000) <= 0 || recv(fd, &hello, sizeof hello, MSG_WAITALL) != (ssize_t)sizeof hello ||
            hello.token != L.token || hello.rank <= 0) {
            close(fd);
            continue;
        }
        keepalive(fd);
        L.fd[L.n] = fd;
        L.rank[L.n++] = hello.rank;
    }
    close(L.listen_fd);
    L.listen_fd = -1;
    if (L.n > 0 && start_watch() != 0) return 0;
    return L.n;
}

int g4_live_connect(const g4_live_addr *a, int rank, double timeout_s, g4_err *err) {
    for (int k = 0; k < a->n_ip && k < G4_LIVE_MAX_ADDRS; k++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) break;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = a->ip[k], .sin_port = htons((uint16_t)a->port)};
        int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa), e = 0;
        socklen_t el = sizeof e;
        struct pollfd p = {fd, POLLOUT, 0};
        if (rc != 0 && (errno != EINPROGRESS || poll(&p, 1, (int)(timeout_s * 1000 / a->n_ip)) <= 0 ||
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0)) {
            close(fd);
            continue;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        struct { uint64_t token; int32_t rank, pad; } hello = {a->token, rank, 0};
        if (send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) { close(fd); continue; }
        keepalive(fd);
        L.fd[0] = fd;
        L.rank[0] = 0;
        L.n = 1;
        if (start_watch() != 0) return g4_err_set(err, G4_ENOMEM, "cannot start the liveness watcher");
        return G4_OK;
    }
    return g4_err_set(err, G4_EIO, "no address of rank 0 answered on port %d", (int)a->port);
}

int g4_live_gone(void) { return atomic_load(&gone); }

void g4_live_stop(void) {
    if (L.running) {
        if (write(L.wake[1], "x", 1) == 1) pthread_join(L.thread, NULL);
        L.running = 0;
    }
    for (int i = 0; i < L.n; i++)
        if (L.fd[i] >= 0) close(L.fd[i]);
    L.n = 0;
    for (int i = 0; i < 2; i++)
        if (L.wake[i] >= 0) { close(L.wake[i]); L.wake[i] = -1; }
    if (L.listen_fd >= 0) { close(L.listen_fd); L.listen_fd = -1; }
}
