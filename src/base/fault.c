/* fault.c — see fault.h. A small table of armed points, each with its own hit count. */
#include "base/fault.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

enum { MAX_POINTS = 8, NAME_MAX_ = 48 };

typedef struct {
    char name[NAME_MAX_];
    long at;      /* fails the at-th hit ... */
    int onward;   /* ... and every later one */
    long hits;
} point;

static point points[MAX_POINTS];
static int n_points;
static atomic_int state; /* 0: G4_FAULT not read yet, 1: nothing armed, 2: armed */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* under mu */
static int parse(const char *spec) {
    n_points = 0;
    while (spec && *spec) {
        const char *colon = strchr(spec, ':'), *comma = strchr(spec, ',');
        if (!colon || (comma && comma < colon) || colon == spec || colon - spec >= NAME_MAX_ || n_points == MAX_POINTS) return G4_EINVAL;
        point *p = &points[n_points];
        memcpy(p->name, spec, (size_t)(colon - spec));
        p->name[colon - spec] = 0;
        char *end;
        p->at = strtol(colon + 1, &end, 10);
        p->onward = *end == '+';
        if (p->onward) end++;
        if (end == colon + 1 || p->at < 1 || (*end && *end != ',')) return G4_EINVAL;
        p->hits = 0;
        n_points++;
        spec = *end ? end + 1 : end;
    }
    return G4_OK;
}

static void load_env(void) {
    pthread_mutex_lock(&mu);
    if (atomic_load(&state) == 0) {
        const char *v = getenv("G4_FAULT");
        if (v && *v && parse(v)) {
            fprintf(stderr, "g4tp: ignoring G4_FAULT=\"%s\": expected name:N[+][,name:N[+]...]\n", v);
            n_points = 0;
        }
        atomic_store(&state, n_points ? 2 : 1);
    }
    pthread_mutex_unlock(&mu);
}

int g4_fault_hit(const char *name) {
    int st = atomic_load_explicit(&state, memory_order_relaxed);
    if (st == 1) return 0;
    if (st == 0) {
        load_env();
        if (atomic_load(&state) == 1) return 0;
    }
    int fire = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_points; i++) {
        point *p = &points[i];
        if (strcmp(p->name, name)) continue;
        p->hits++;
        if (p->hits == p->at || (p->onward && p->hits > p->at)) fire = 1;
    }
    pthread_mutex_unlock(&mu);
    return fire;
}

int g4_fault_set(const char *spec) {
    pthread_mutex_lock(&mu);
    int rc = parse(spec);
    if (rc) n_points = 0;
    atomic_store(&state, n_points ? 2 : 1);
    pthread_mutex_unlock(&mu);
    return rc;
}
