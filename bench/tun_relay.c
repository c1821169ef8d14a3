/* tun_relay.c — a network link with latency between two network namespaces, for kernels
 * without the netem qdisc: opens a TUN device in each namespace (setns into /run/netns/NAME)
 * and copies every IP packet from one to the other after holding it DELAY_US microseconds (each
 * direction, so a round trip gains 2 x DELAY_US). Prints "ready" once both devices exist (the
 * caller then gives them addresses and brings them up); runs until SIGTERM or for SECONDS.
 *   tun_relay NS_A DEV_A NS_B DEV_B DELAY_US [SECONDS]
 * Used by bench/netns_bench.sh. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

typedef struct pkt { struct pkt *next; long long due; int len; unsigned char data[]; } pkt;
typedef struct { pkt *head, *tail; } queue;

static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int tun_in(const char *ns, const char *dev) {
    char path[256];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    int nfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) { fprintf(stderr, "tun_relay: enter %s: %s\n", path, strerror(errno)); exit(1); }
    close(nfd);
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) { fprintf(stderr, "tun_relay: %s in %s: %s\n", dev, ns, strerror(errno)); exit(1); }
    return fd;
}

/* reads every waiting packet of fd into q, due delay from now */
static void take(int fd, queue *q, long long delay) {
    unsigned char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) return;
        pkt *p = malloc(sizeof *p + (size_t)n);
        if (!p) return; /* dropped, as a full link would */
        p->next = NULL;
        p->due = now_ns() + delay;
        p->len = (int)n;
        memcpy(p->data, buf, (size_t)n);
        if (q->tail) q->tail->next = p; else q->head = p;
        q->tail = p;
    }
}

/* writes the packets that are due; returns ns until the next one (-1: none) */
static long long give(int fd, queue *q) {
    long long t = now_ns();
    while (q->head && q->head->due <= t) {
        pkt *p = q->head;
        if (write(fd, p->data, (size_t)p->len) < 0 && errno == EAGAIN) return 10000;
        q->head = p->next;
        if (!q->head) q->tail = NULL;
        free(p);
    }
    return q->head ? q->head->due - t : -1;
}

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: tun_relay NS_A DEV_A NS_B DEV_B DELAY_US [SECONDS]\n"); return 2; }
    long long delay = atoll(argv[5]) * 1000LL, end = argc > 6 ? now_ns() + atoll(argv[6]) * 1000000000LL : 0;
    int fa = tun_in(argv[1], argv[2]), fb = tun_in(argv[3], argv[4]);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    printf("ready\n");
    fflush(stdout);
    queue to_b = {0}, to_a = {0};
    while (!stop && (!end || now_ns() < end)) {
        long long wa = give(fb, &to_b), wb = give(fa, &to_a), w = 200000000;
        if (wa >= 0 && wa < w) w = wa;
        if (wb >= 0 && wb < w) w = wb;
        struct pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
        struct timespec ts = {w / 1000000000LL, w % 1000000000LL};
        if (ppoll(p, 2, &ts, NULL) < 0 && errno != EINTR) break;
        if (p[0].revents & POLLIN) take(fa, &to_b, delay);
        if (p[1].revents & POLLIN) take(fb, &to_a, delay);
    }
    return 0;
}
