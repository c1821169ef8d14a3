/* engine.c — the g4_engine of include/g4.h: loads the model once per rank, runs ranks as
 * threads (local backend) or joins an MPI job, and drives forward steps with a leader/follower
 * protocol: rank 0 broadcasts each command (run a batch, apply KV ops, stop), every rank
 * executes it, and the logits of each rank's vocab rows are gathered on rank 0. The leader
 * alone decides KV blocks and prefix-cache hits (kvseq.h); the ranks apply its ops to their
 * own pools ahead of each batch, so their block tables never differ.
 * Knows the model only through forward.h / weights.h; the file formats through model_source.h. */
#include "g4.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/fault.h"
#include "base/mapfile.h"
#include "base/numa.h"
#include "base/threadpool.h"
#include "engine/kvbudget.h"
#include "engine/kvdisk.h"
#include "engine/kvfile.h"
#include "engine/kvseq.h"
#include "engine/model_source.h"
#include "engine/speculate.h"
#include "gemma4/assistant.h"
#include "gemma4/forward.h"
#include "gemma4/vision.h"
#include "image/processor.h"
#include "kernels/kernels.h"
#include "kernels/kernels_fast.h"
#include "kernels/probe.h"
#include "model/matconv.h"
#include "tp/comm.h"

enum { CMD_FORWARD = 1, CMD_KV_OPS, CMD_STOP, CMD_DRAFT, CMD_KV_DISK };

/* FORWARD: n tokens, a words of KV ops ahead of them; KV_OPS: a words of ops; DRAFT: n
 * sequences, a words of ops, b = k | want_logits << 8; KV_DISK: a words of ops, then a disk_req */
typedef struct { int64_t op, n, a, b; } cmd_hdr;

/* The KV cache on disk: what every rank does with its own file of an entry (kvfile.h). */
enum { DISK_SAVE = 1, DISK_LOAD, DISK_DROP };
typedef struct {
    int32_t sub, seq;
    int64_t total, slide_from, p0, p1;
    uint64_t identity;
    char stem[4200];
} disk_req;

typedef struct rank_state {
    struct g4_engine *e;
    int rank;
    g4_tp_plan plan;
    g4_rank_weights w;
    g4_pool *pool;
    g4_comm *comm;
    g4_rank_model *m;
    float *logits_local;   /* [max_batch][n_v_local] */
    int32_t *payload;      /* [5 * max_batch]: ids, positions, sequences, logits flags, image block ends */
    int32_t *ops;          /* followers: [G4_KV_OPS_CAP] KV ops received */
    g4_asst *asst;         /* the MTP drafter (speculative "mtp:"), else NULL */
    int32_t *dpay;         /* [3 * max_seqs] draft requests: sequence, position, token */
    float *dhid;           /* [max_seqs][hidden] their target hidden states */
    int32_t *dids;         /* [max_seqs][G4_SPEC_MAX_K] drafts */
    disk_req disk;         /* CMD_KV_DISK's request, as received */
    g4_err disk_err;       /* ... and why this rank's part failed */
    pthread_t thread;
    int has_thread;
    int rc;
    g4_err err;
    int fail_at, n_forward; /* tests: G4_TEST_FAIL_RANK=R:K makes rank R fail its K-th forward */
} rank_state;

struct g4_engine {
    g4_engine_opts o;
    char *model_dir;
    g4_model_source src;
    const g4_config *cfg;
    const g4_kernels *K;   /* the set: layouts, ISA agreement */
    int math;              /* G4_MATH_*: the forward pass runs g4_kernels_math(K, math) */
    int tp, mpi, my_rank;
    rank_state *ranks;     /* local: [tp]; mpi: [1] (this process) */
    int n_ranks_here;
    int64_t max_nv;
    float *gathered;       /* leader: [tp][max_batch][max_nv] */
    uint8_t *seq_used;     /* leader: [max_seqs] */
    int64_t *seq_cap;
    size_t kv_budget;
    char kv_note[320];     /* how kv_budget was chosen */
    int kv_dtype;
    int64_t kv_pages;      /* pages of each rank's pool */
    g4_kv_geom geom;       /* rank 0's KV geometry (the same on every rank) */
    g4_kvmgr *kv;          /* leader: sequences' blocks, the prefix cache */
    g4_spec_cfg spec;      /* the drafter */
    int64_t kv_keep;       /* sliding positions kept below each window for it */
    float *draft_logits;   /* leader: where CMD_DRAFT writes logits (NULL: none wanted) */
    const float *const *embd; /* leader: the running forward's given embeddings (g4_batch.embd) */
    g4_vision *vision;     /* leader: the vision tower (NULL: the model takes no images) */
    g4_kvdisk *kvd;        /* leader: --kv-cache-dir's index (NULL: none) */
    uint64_t identity;     /* what computed the KV rows: model files, dtypes, TP, math, kernels, version */
    char ident[400];       /* ... as text (0: not computed yet) */
    int32_t disk_rc[64];   /* leader: each rank's status of the last CMD_KV_DISK */
    int32_t **last_tok;    /* leader: [max_seqs] the tokens of the last sequence closed in each slot */
    int64_t *last_n;
    int64_t *hint, *last_hint; /* leader: [max_seqs] where each slot's prompt ends (g4_engine_seq_hint) */
    int32_t stop_ids[16];
    int n_stop;
    int closed;
    atomic_int failed;     /* the group failed: every later command fails at once with failure */
    int failure_code;
    char failure[sizeof ((g4_err *)0)->msg];
};

/* ---- one rank ---------------------------------------------------------------------------- */

/* The KV ops ahead of a command: the leader sends its queue, the others receive and all apply. */
static int exec_ops(rank_state *rs, int64_t n, g4_err *err) {
    g4_engine *e = rs->e;
    if (n < 0 || n > G4_KV_OPS_CAP) return g4_err_set(err, G4_EINVAL, "%lld words of KV ops (at most %d)", (long long)n, G4_KV_OPS_CAP);
    int64_t have;
    int32_t *ops = e->my_rank == 0 && rs->rank == 0 ? (int32_t *)g4_kvmgr_ops(e->kv, &have) : rs->ops;
    if (g4_comm_broadcast(rs->comm, ops, sizeof(int32_t) * (size_t)n, 0)) return g4_err_set(err, G4_ECOMM, "broadcast of the KV ops failed");
    return g4_kvstore_apply(g4_rank_kv(rs->m), ops, n, err);
}

/* The weights come from memory-mapped files (not --load copy): a file truncated or changed in
 * place under them (mapfile.h) makes what was computed since wrong. Checked by this process's
 * first rank after each step. */
static int files_intact(const rank_state *rs, g4_err *err) {
    const char *why = rs == &rs->e->ranks[0] && !rs->e->o.load_copy ? g4_mapfile_check() : NULL;
    return why ? g4_err_set(err, G4_EIO, "%s", why) : G4_OK;
}

static int rank_exec(rank_state *rs, const cmd_hdr *h, g4_err *err) {
    g4_engine *e = rs->e;
    switch (h->op) {
    case CMD_KV_OPS: return exec_ops(rs, h->a, err);
    case CMD_FORWARD: {
        int n = (int)h->n;
        int rc0 = h->a ? exec_ops(rs, h->a, err) : G4_OK;
        if (rc0) return rc0;
        if (rs->fail_at > 0 && ++rs->n_forward == rs->fail_at)
            return g4_err_set(err, G4_EIO, "injected failure (G4_TEST_FAIL_RANK) at forward %d", rs->fail_at);
        int rc = g4_comm_broadcast(rs->comm, rs->payload, sizeof(int32_t) * 5 * (size_t)n, 0);
        if (rc) return g4_err_set(err, G4_ECOMM, "broadcast of the batch failed");
        uint8_t flags[n > 0 ? n : 1];
        int n_logits = 0, spans = 0;
        for (int i = 0; i < n; i++) { flags[i] = (uint8_t)rs->payload[3 * n + i]; n_logits += flags[i]; spans |= rs->payload[4 * n + i]; }
        /* given embeddings enter on the leader's rank 0 only (forward.c ph_embed) */
        g4_batch b = {n, rs->payload, rs->payload + n, rs->payload + 2 * n, flags, e->my_rank == 0 && rs->rank == 0 ? e->embd : NULL,
                      spans ? rs->payload + 4 * n : NULL};
        if ((rc = g4_rank_forward(rs->m, &b, rs->logits_local, err))) return rc;
        /* MPI: before this process's logits go out (the leader does not see its files); threads:
         * after the gather, when every rank's reads are done */
        if (e->mpi && (rc = files_intact(rs, err))) return rc;
        if (n_logits > 0 && e->tp > 1) {
            /* pad each rank's block to max_nv columns so the gather has equal sizes */
            const int64_t nv = rs->plan.n_v_local;
            if (nv != e->max_nv)
                for (int k = n_logits - 1; k >= 0; k--) memmove(rs->logits_local + k * e->max_nv, rs->logits_local + k * nv, sizeof(float) * (size_t)nv);
            rc = g4_comm_gather(rs->comm, rs->logits_local, sizeof(float) * (size_t)n_logits * (size_t)e->max_nv,
                                e->my_rank == 0 && rs->rank == 0 ? e->gathered : NULL, 0);
            if (rc) return g4_err_set(err, G4_ECOMM, "gathering the logits failed");
        }
        return e->mpi ? G4_OK : files_intact(rs, err);
    }
    case CMD_DRAFT: {
        const int n = (int)h->n, k = (int)(h->b & 0xff), want = (int)(h->b >> 8) & 1;
        if (!rs->asst || n < 1 || n > e->o.max_seqs || k < 1 || k > G4_SPEC_MAX_K)
            return g4_err_set(err, G4_EINVAL, "malformed draft command (%d sequences, k %d)", n, k);
        int rc = h->a ? exec_ops(rs, h->a, err) : G4_OK;
        if (rc) return rc;
        const int64_t H = e->cfg->hidden_size;
        if (g4_comm_broadcast(rs->comm, rs->dpay, sizeof(int32_t) * 3 * (size_t)n, 0) ||
            g4_comm_broadcast(rs->comm, rs->dhid, sizeof(float) * (size_t)n * (size_t)H, 0))
            return g4_err_set(err, G4_ECOMM, "broadcast of the draft requests failed");
        rc = g4_asst_draft(rs->asst, n, k, rs->dpay, rs->dpay + n, rs->dpay + 2 * n, rs->dhid, rs->dids, want,
                           e->my_rank == 0 && rs->rank == 0 ? e->draft_logits : NULL, err);
        return rc ? rc : files_intact(rs, err);
    }
    case CMD_KV_DISK: {
        int rc = h->a ? exec_ops(rs, h->a, err) : G4_OK;
        if (rc) return rc;
        if (g4_comm_broadcast(rs->comm, &rs->disk, sizeof rs->disk, 0)) return g4_err_set(err, G4_ECOMM, "broadcast of a KV file request failed");
        const disk_req *d = &rs->disk;
        rs->disk.stem[sizeof rs->disk.stem - 1] = 0;
        /* a file that cannot be written or read is this rank's answer, not the group's failure */
        const g4_kvfile_span sp = {d->identity, rs->rank, e->tp, d->seq, d->total, d->slide_from, d->p0, d->p1};
        int32_t st = G4_OK;
        if (d->sub == DISK_SAVE) st = g4_kvfile_write_rank(g4_rank_kv(rs->m), d->stem, &sp, &rs->disk_err);
        else if (d->sub == DISK_LOAD) st = g4_kvfile_read_rank(g4_rank_kv(rs->m), d->stem, &sp, &rs->disk_err);
        else if (d->sub == DISK_DROP) {
            char path[4400];
            g4_kvfile_rank_path(path, sizeof path, d->stem, rs->rank, e->tp);
            unlink(path);
        } else st = g4_err_set(&rs->disk_err, G4_EINVAL, "unknown KV file request %d", d->sub);
        if (st && e->mpi) fprintf(stderr, "g4tp: rank %d: %s\n", rs->rank, rs->disk_err.msg);
        const int lead_rank = e->my_rank == 0 && rs->rank == 0;
        if (e->tp == 1) e->disk_rc[0] = st;
        else if (g4_comm_gather(rs->comm, &st, sizeof st, lead_rank ? e->disk_rc : NULL, 0))
            return g4_err_set(err, G4_ECOMM, "gathering the ranks' KV file status failed");
        return G4_OK;
    }
    default: return g4_err_set(err, G4_EINVAL, "unknown command %lld", (long long)h->op);
    }
}

/* A failed collective: the comm's own account (which rank, how) replaces the caller's message. */
static int comm_error(rank_state *rs, int rc, g4_err *err) {
    const char *why = g4_comm_failure(rs->comm);
    if (why) g4_err_set(err, G4_ECOMM, "%s", why);
    return rc;
}

/* Followers: receive a command, execute it, repeat until CMD_STOP. */
static int follow_loop(rank_state *rs, g4_err *err) {
    for (;;) {
        cmd_hdr h;
        int rc = g4_comm_broadcast(rs->comm, &h, sizeof h, 0);
        if (rc) return comm_error(rs, g4_err_set(err, G4_ECOMM, "rank %d: lost the leader", rs->rank), err);
        if (h.op == CMD_STOP) {
            if (h.a) g4_comm_mpi_ending(); /* the leader skips MPI_Finalize: so do we */
            return G4_OK;
        }
        if ((rc = rank_exec(rs, &h, err))) {
            if (rc != G4_ECOMM || !g4_comm_failure(rs->comm)) g4_comm_fail(rs->comm, err->msg);
            return comm_error(rs, rc, err);
        }
    }
}

/* Leader: broadcast a command and execute it as rank 0. Any failure fails the group (the ranks
 * are no longer in step): from then on every command fails at once with the same message. */
static int lead(g4_engine *e, cmd_hdr h, g4_err *err) {
    rank_state *rs = &e->ranks[0];
    if (atomic_load(&e->failed)) return g4_err_set(err, e->failure_code, "%s", e->failure);
    int rc = g4_comm_broadcast(rs->comm, &h, sizeof h, 0);
    if (rc) g4_err_set(err, G4_ECOMM, "a rank failed (broadcast)");
    else rc = rank_exec(rs, &h, err);
    if (rc && rc != G4_ECOMM) g4_comm_fail(rs->comm, err->msg);
    if (rc) {
        if (rc == G4_ECOMM) comm_error(rs, rc, err); /* else rank 0's own error says it best, whole */
        snprintf(e->failure, sizeof e->failure, "%s", err->msg);
        e->failure_code = rc;
        atomic_store(&e->failed, 1);
    }
    return rc;
}

/* ---- setup ------------------------------------------------------------------------------- */

/* --numa: rank r (under MPI, its index among this host's ranks) takes node r % nodes and that
 * node's CPUs for its threads (ranks sharing a node take turns); the thread that loads the
 * rank is bound there too and prefers the node's memory, so what it allocates and copies is
 * local. Says where each rank runs. */
static int numa_place(g4_engine *e, int rank, int *cpus, int *pin, g4_err *err) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int local = e->mpi && lr ? atoi(lr) : rank, nodes = g4_numa_nodes(), node = local % nodes;
    int nc[G4_NUMA_MAX_CPUS]; /* per call: ranks initialise concurrently */
    int m = g4_numa_node_cpus(node, nc, G4_NUMA_MAX_CPUS), t = e->o.threads < 64 ? e->o.threads : 64, mem_ok = 0;
    if (m == 0) return g4_err_set(err, G4_EINVAL, "--numa: NUMA node %d lists no CPUs", node);
    for (int i = 0; i < t; i++) cpus[i] = nc[((local / nodes) * t + i) % m];
    *pin = e->o.threads <= 64;
    int rc = g4_numa_bind(node, cpus, t, &mem_ok, err);
    if (rc) return rc;
    char where[256];
    g4_numa_describe(where, sizeof where);
    fprintf(stderr, "g4tp: rank %d: %s, %d thread%s; memory %s node %d\n", rank, where, t, t == 1 ? "" : "s",
            mem_ok ? "preferred on" : "not bound (the kernel refused the policy) to", node);
    return G4_OK;
}

static int rank_init(g4_engine *e, rank_state *rs, int rank, g4_comm *comm, g4_dtype_req dtype, g4_err *err) {
    rs->e = e;
    rs->rank = rank;
    rs->comm = comm;
    int rc = g4_tp_plan_make(e->cfg, g4_model_source_wdtype(&e->src, dtype), e->tp, rank, &rs->plan, err);
    if (rc) return rc;
    int cpus[64], ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *fr = getenv("G4_TEST_FAIL_RANK");
    if (fr && atoi(fr) == rank && strchr(fr, ':')) rs->fail_at = atoi(strchr(fr, ':') + 1);
    int pin = e->o.threads * e->n_ranks_here <= ncpu && e->o.threads <= 64 && !e->mpi;
    for (int i = 0; pin && i < e->o.threads; i++) cpus[i] = rank * e->o.threads + i;
    /* --numa binds this thread before it copies or converts any weight: those pages land on the node */
    if (e->o.numa && (rc = numa_place(e, rank, cpus, &pin, err))) return rc;
    if (g4_fault_hit("engine.bind")) return g4_err_set(err, G4_ENOMEM, "out of memory for rank %d's weights", rank);
    if ((rc = g4_model_source_bind(&e->src, &rs->plan, dtype, e->o.load_copy, &rs->w, err))) return rc;
    /* q4_0 in the layout the set reads fastest (same bits); G4_Q4_LAYOUT=blocks keeps blocks,
     * G4_Q4_TAIL=0 a grouped matrix's partial groups as blocks (as artifacts before version 5).
     * An artifact sharded in that layout stays in the map. */
    const char *q4l = getenv("G4_Q4_LAYOUT");
    const int q4_layout = q4l && !strcmp(q4l, "blocks") ? 0 : g4_q4_0_layout_for(e->K);
    if ((rc = g4_weights_set_q4_layout(&rs->w, e->cfg, &rs->plan, q4_layout, g4_q4_0_tail_default(), err))) return rc;
    /* q4_0 / q8_0 row-parallel matrices wider than G4_ROWPAR_PART_COLS=N (default: matconv.h,
     * by dtype; 0 = never) in column parts, where the set walks rows through their slices (same bits) */
    const char *pc = getenv("G4_ROWPAR_PART_COLS");
    const int64_t part_cols = pc ? (atoll(pc) > 0 ? atoll(pc) : -1) : 0;
    if (e->K->matmul_slices && (rc = g4_weights_split_rowpar(&rs->w, e->cfg, &rs->plan, part_cols, err))) return rc;
    if ((rc = g4_pool_create(e->o.threads, pin ? cpus : NULL, &rs->pool, err))) return rc;
    g4_rank_model_opts mo = {e->o.max_batch, e->o.max_ctx, e->o.max_seqs, e->o.mutation, e->kv_pages, e->kv_dtype};
    if ((rc = g4_rank_model_create(e->cfg, &rs->plan, &rs->w, g4_kernels_math(e->K, e->math), rs->pool, comm, &mo, &rs->m, err))) return rc;
    size_t nlog = (size_t)e->o.max_batch * (size_t)e->max_nv;
    rs->logits_local = malloc(sizeof(float) * nlog + 64);
    rs->payload = malloc(sizeof(int32_t) * 5 * (size_t)e->o.max_batch + 64);
    rs->ops = malloc(sizeof(int32_t) * G4_KV_OPS_CAP);
    if (!rs->logits_local || !rs->payload || !rs->ops) return g4_err_set(err, G4_ENOMEM, "out of memory");
    if (e->spec.method == G4_SPEC_MTP) {
        const g4_asst_target t = {e->cfg, &rs->plan, &rs->w, g4_rank_kv(rs->m), g4_kernels_math(e->K, e->math), rs->pool, comm,
                                  (size_t)e->o.max_batch * (size_t)e->cfg->hidden_size, e->o.max_seqs, e->o.mutation};
        if ((rc = g4_asst_open(e->spec.dir, &t, &rs->asst, err))) return rc;
        rs->dpay = malloc(sizeof(int32_t) * 3 * (size_t)e->o.max_seqs + 16);
        rs->dhid = malloc(sizeof(float) * (size_t)e->o.max_seqs * (size_t)e->cfg->hidden_size + 16);
        rs->dids = malloc(sizeof(int32_t) * (size_t)e->o.max_seqs * G4_SPEC_MAX_K + 16);
        if (!rs->dpay || !rs->dhid || !rs->dids) return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    return G4_OK;
}

static void rank_free(rank_state *rs) {
    g4_asst_free(rs->asst);
    free(rs->dpay);
    free(rs->dhid);
    free(rs->dids);
    g4_rank_model_free(rs->m);
    g4_pool_free(rs->pool);
    g4_weights_free(&rs->w);
    g4_tp_plan_free(&rs->plan);
    free(rs->logits_local);
    free(rs->payload);
    free(rs->ops);
}

/* MPI ranks may run on hosts with different CPUs; each kernel set has its own arithmetic order,
 * so all ranks use the best set every one of them runs (else TP results would depend on which
 * host holds which heads). */
static int agree_on_isa(g4_engine *e, g4_comm *c, g4_err *err) {
    static const char *const order[] = {"scalar", "avx2", "avx512"};
    int32_t mine = 0, all[64] = {0};
    for (int i = 0; i < 3; i++)
        if (!strcmp(e->K->name, order[i])) mine = i;
    if (g4_comm_gather(c, &mine, sizeof mine, e->my_rank == 0 ? all : NULL, 0)) return g4_err_set(err, G4_ECOMM, "ISA agreement failed");
    int32_t common = mine;
    if (e->my_rank == 0)
        for (int r = 0; r < e->tp; r++) common = all[r] < common ? all[r] : common;
    if (g4_comm_broadcast(c, &common, sizeof common, 0)) return g4_err_set(err, G4_ECOMM, "ISA agreement failed");
    const g4_kernels *K = g4_kernels_by_name(order[common]);
    if (K) e->K = K;
    return G4_OK;
}

/* The leader's KV op queue is full: send it ahead of the next command. */
static int flush_ops(void *ctx, const int32_t *ops, int64_t n, g4_err *err) {
    (void)ops;
    return lead(ctx, (cmd_hdr){CMD_KV_OPS, 0, n, 0}, err);
}

/* The KV cache's element type, geometry and budget per rank: --kv-budget-mb, or by default
 * what this machine has free once this process's ranks hold their weights (kvbudget.h). */
static int kv_setup(g4_engine *e, g4_dtype_req dtype, g4_err *err) {
    const char *kd = e->o.kv_dtype && *e->o.kv_dtype ? e->o.kv_dtype : "f32";
    e->kv_dtype = g4_dtype_from_name(kd);
    if (e->kv_dtype < 0 || !g4_dtype_info(e->kv_dtype)->kv)
        return g4_err_set(err, G4_EINVAL, "unknown --kv-dtype \"%s\" (f32, bf16, q8_0)", kd);
    uint64_t weights = 0;
    int rc = G4_OK;
    for (int r = 0; r < e->n_ranks_here && rc == G4_OK; r++) {
        g4_tp_plan plan;
        if ((rc = g4_tp_plan_make(e->cfg, g4_model_source_wdtype(&e->src, dtype), e->tp, e->mpi ? e->my_rank : r, &plan, err))) break;
        weights += g4_model_source_rank_bytes(&e->src, &plan, dtype);
        if (r == 0) rc = g4_kv_geom_make(e->cfg, &plan, e->kv_dtype, &e->geom, err);
        g4_tp_plan_free(&plan);
    }
    if (rc) return rc;
    const int64_t one = g4_kv_seq_pages(&e->geom, e->o.max_ctx, e->o.max_batch + (int)e->kv_keep);
    if (e->o.kv_budget_bytes > 0) {
        e->kv_budget = (size_t)e->o.kv_budget_bytes;
        snprintf(e->kv_note, sizeof e->kv_note, "%zu MiB per rank (--kv-budget-mb)", e->kv_budget >> 20);
    } else {
        g4_mem_info mi;
        g4_mem_info_read(&mi);
        e->kv_budget = g4_kv_default_budget(&mi, weights, e->n_ranks_here, (uint64_t)one * (uint64_t)e->geom.page_bytes, e->kv_note, sizeof e->kv_note);
    }
    return G4_OK;
}

/* The pool's pages per rank from the budget (MPI: the smallest any rank has, so that every
 * rank's pool holds the pages the leader hands out; refused when one sequence of max_ctx would
 * not fit), and on the leader the block manager. */
static int kv_pool_setup(g4_engine *e, g4_comm *c, g4_err *err) {
    if (e->mpi) {
        uint64_t mine = e->kv_budget, all[64] = {0}, least = mine;
        if (g4_comm_gather(c, &mine, sizeof mine, e->my_rank == 0 ? all : NULL, 0)) return g4_err_set(err, G4_ECOMM, "KV budget agreement failed");
        for (int r = 0; e->my_rank == 0 && r < e->tp; r++) least = all[r] < least ? all[r] : least;
        if (g4_comm_broadcast(c, &least, sizeof least, 0)) return g4_err_set(err, G4_ECOMM, "KV budget agreement failed");
        if (least < mine) {
            e->kv_budget = (size_t)least;
            snprintf(e->kv_note + strlen(e->kv_note), sizeof e->kv_note - strlen(e->kv_note), "; %llu MiB: the least of the ranks",
                     (unsigned long long)(least >> 20));
        }
    }
    const int64_t pb = e->geom.page_bytes, one = g4_kv_seq_pages(&e->geom, e->o.max_ctx, e->o.max_batch + (int)e->kv_keep);
    e->kv_pages = (int64_t)(e->kv_budget / (size_t)pb);
    /* more pages than every slot at max_ctx with every sliding block kept, four times over,
     * cannot be used (and their tables would only cost memory) */
    const int64_t tlen = (e->o.max_ctx + e->geom.bs - 1) / e->geom.bs;
    const int64_t most = 4 * (int64_t)e->o.max_seqs * tlen * (e->geom.ng[0] + e->geom.ng[1]);
    if (e->kv_pages > most) e->kv_pages = most;
    if (e->kv_pages > INT32_MAX / 2) e->kv_pages = INT32_MAX / 2;
    if (e->kv_pages < one)
        return g4_err_set(err, G4_EINVAL,
                          "the KV budget (--kv-budget-mb %zu) is too small for one sequence of --max-ctx %lld: it needs %lld MiB per rank "
                          "(%s KV); raise --kv-budget-mb or lower --max-ctx", e->kv_budget >> 20, (long long)e->o.max_ctx,
                          (long long)((one * pb + (1 << 20) - 1) >> 20), g4_dtype_name(e->kv_dtype));
    if (e->my_rank == 0) {
        int rc = g4_kvmgr_create(&e->geom, e->kv_pages, e->o.max_seqs, e->o.max_ctx, e->o.max_batch, !e->o.no_prefix_cache, flush_ops, e, &e->kv, err);
        if (rc) return rc;
        g4_kvmgr_set_keep(e->kv, e->kv_keep);
    }
    return G4_OK;
}

/* The drafter of opts.speculative, and the sliding rows the KV cache keeps for it (an MTP
 * assistant is checked against the target here, before any rank loads it). */
static int spec_setup(g4_engine *e, g4_err *err) {
    int rc = g4_spec_parse(e->o.speculative, &e->spec, err);
    if (rc) return rc;
    e->spec.always = e->o.speculative_always;
    int window = 0, tw = 0;
    for (int l = 0; l < e->cfg->n_layers; l++)
        if (!e->cfg->layers[l].full) tw = e->cfg->layers[l].window;
    if (e->spec.method == G4_SPEC_MTP) {
        g4_asst_info info;
        if ((rc = g4_asst_probe(e->spec.dir, e->cfg, &info, err))) return rc;
        window = info.window;
    }
    e->kv_keep = g4_spec_keep(&e->spec, window, tw);
    return G4_OK;
}

/* Local backend: rank 0 initialises in the caller's thread, the others in their own threads
 * (so their memory is touched first by the thread that uses it). */
typedef struct { g4_engine *e; int rank; g4_comm *comm; g4_dtype_req dtype; } init_arg;
static pthread_barrier_t init_barrier;
static void *local_rank_main(void *arg) {
    init_arg *ia = arg;
    rank_state *rs = &ia->e->ranks[ia->rank];
    rs->rc = rank_init(ia->e, rs, ia->rank, ia->comm, ia->dtype, &rs->err);
    pthread_barrier_wait(&init_barrier);
    pthread_barrier_wait(&init_barrier); /* leader decided whether all ranks are up */
    if (rs->rc == G4_OK && !ia->e->closed) rs->rc = follow_loop(rs, &rs->err);
    free(ia);
    return NULL;
}

/* The engine's own memory (ranks and comms are torn down by the caller first). */
static void free_engine(g4_engine *e) {
    g4_kvdisk_free(e->kvd);
    for (int i = 0; e->last_tok && i < e->o.max_seqs; i++) free(e->last_tok[i]);
    free(e->last_tok);
    free(e->last_n);
    free(e->hint);
    free(e->last_hint);
    g4_vision_free(e->vision);
    g4_kvmgr_free(e->kv);
    g4_kv_geom_free(&e->geom);
    g4_model_source_close(&e->src);
    free(e->ranks);
    free(e->seq_used);
    free(e->seq_cap);
    free(e->gathered);
    free(e->model_dir);
    free(e);
}

static int kv_disk_open(g4_engine *e, g4_err *err);

int g4_engine_open(const g4_engine_opts *opts, g4_engine **out, g4_err *err) {
    *out = NULL;
    g4_engine *e = calloc(1, sizeof *e);
    if (!e) return g4_err_set(err, G4_ENOMEM, "out of memory");
    e->o = *opts;
    if (e->o.threads < 1) e->o.threads = 1;
    const int default_batch = e->o.max_batch < 1;
    if (default_batch) e->o.max_batch = 128;
    if (e->o.max_seqs < 1) e->o.max_seqs = 16;
    e->mpi = opts->comm && strcmp(opts->comm, "mpi") == 0;
    if (opts->comm && !e->mpi && strcmp(opts->comm, "local") != 0) {
        free(e);
        return g4_err_set(err, G4_EINVAL, "--comm must be \"local\" or \"mpi\" (got \"%s\")", opts->comm);
    }
    g4_dtype_req dtype = G4_DTYPE_AS_STORED;
    if (opts->dtype && *opts->dtype && (dtype.mat = g4_dtype_from_name(opts->dtype)) < 0) {
        free(e);
        return g4_err_set(err, G4_EINVAL, "unknown dtype \"%s\" (f32, bf16, f16, q8_0, q4_0)", opts->dtype);
    }
    if (opts->head_dtype && *opts->head_dtype && (dtype.head = g4_dtype_from_name(opts->head_dtype)) < 0) {
        free(e);
        return g4_err_set(err, G4_EINVAL, "unknown head dtype \"%s\" (f32, bf16, f16, q8_0, q4_0)", opts->head_dtype);
    }
    if ((e->math = g4_math_from_name(opts->math && *opts->math ? opts->math : NULL)) < 0) {
        free(e);
        return g4_err_set(err, G4_EINVAL, "unknown math \"%s\" (exact, fast)", opts->math);
    }
    e->K = opts->isa && *opts->isa ? g4_kernels_by_name(opts->isa) : g4_kernels_get();
    if (!e->K) {
        free(e);
        return g4_err_set(err, G4_EUNSUPPORTED, "kernel set \"%s\" is not available on this CPU", opts->isa);
    }
    g4_comm *comms[64] = {0};
    int rc;
    if (e->mpi) {
        if ((rc = g4_comm_mpi_world(&e->my_rank, &e->tp, err))) { free(e); return rc; }
        if (opts->tp > 0 && opts->tp != e->tp) {
            rc = g4_err_set(err, G4_EINVAL, "--tp %d does not match the %d MPI processes", opts->tp, e->tp);
            free(e);
            return rc;
        }
        e->n_ranks_here = 1;
    } else {
        /* no --tp: an artifact folder's own TP degree, else 1 */
        int art_tp = opts->tp > 0 ? 0 : g4_model_source_tp(opts->model_dir ? opts->model_dir : ".");
        e->tp = opts->tp > 0 ? opts->tp : (art_tp > 0 ? art_tp : 1);
        if (e->tp > 64) {
            rc = g4_err_set(err, G4_EINVAL, "--tp %d is too large (at most 64 local ranks)", e->tp);
            free(e);
            return rc;
        }
        e->n_ranks_here = e->tp;
    }
    e->model_dir = strdup(opts->model_dir ? opts->model_dir : ".");
    g4_mapfile_set_refolio(!e->o.load_copy); /* a copy reads each file once: no re-read from disk */
    if ((rc = g4_model_source_open(&e->src, e->model_dir, e->mpi ? e->my_rank : -1, e->tp, opts->verify, err))) goto fail_early;
    e->cfg = &e->src.cfg;
    if (default_batch && e->cfg->vision.has_vision) { /* config only: every MPI rank decides the same */
        /* an image's block goes into one step beside a decode token of every other sequence
         * (the scheduler), so the default step holds the processor's largest image */
        g4_image_proc ip;
        g4_err ignore;
        const int most = g4_image_proc_load(e->model_dir, &ip, &ignore) == G4_OK ? ip.max_soft_tokens : 280;
        const int need = (most + e->o.max_seqs + 31) / 32 * 32;
        if (need > e->o.max_batch) e->o.max_batch = need;
    }
    if (e->o.max_ctx <= 0) e->o.max_ctx = e->cfg->max_position_embeddings < 8192 ? e->cfg->max_position_embeddings : 8192;
    if (e->o.max_ctx > e->cfg->max_position_embeddings) {
        rc = g4_err_set(err, G4_EINVAL, "the context limit %lld exceeds max_position_embeddings %lld", (long long)e->o.max_ctx,
                        (long long)e->cfg->max_position_embeddings);
        goto fail_early;
    }
    if (!g4_tp_degree_ok(e->cfg, g4_model_source_wdtype(&e->src, dtype), e->tp)) {
        g4_tp_plan p;
        rc = g4_tp_plan_make(e->cfg, g4_model_source_wdtype(&e->src, dtype), e->tp, 0, &p, err);
        goto fail_early;
    }
    {
        int64_t v0, nv;
        g4_tp_vocab_range(e->cfg->vocab_size, e->tp, 0, &v0, &nv);
        e->max_nv = nv;
    }
    if ((rc = spec_setup(e, err)) || (rc = kv_setup(e, dtype, err))) goto fail_early;
    /* the largest message of an all-reduce: a batch of hidden states */
    size_t max_floats = (size_t)e->o.max_batch * (size_t)e->cfg->hidden_size;
    if (e->mpi) {
        if ((rc = g4_comm_mpi_create(max_floats, &comms[0], err))) goto fail_early;
    } else if ((rc = g4_comm_local_create(e->tp, max_floats, comms, err))) goto fail_early;
    e->ranks = calloc((size_t)e->n_ranks_here, sizeof *e->ranks);
    e->seq_used = calloc((size_t)e->o.max_seqs, 1);
    e->seq_cap = calloc((size_t)e->o.max_seqs, sizeof *e->seq_cap);
    if (e->my_rank == 0) {
        e->gathered = malloc(sizeof(float) * (size_t)e->tp * (size_t)e->o.max_batch * (size_t)e->max_nv + 64);
        e->last_tok = calloc((size_t)e->o.max_seqs, sizeof *e->last_tok);
        e->last_n = calloc((size_t)e->o.max_seqs, sizeof *e->last_n);
        e->hint = calloc((size_t)e->o.max_seqs, sizeof *e->hint);
        e->last_hint = calloc((size_t)e->o.max_seqs, sizeof *e->last_hint);
    }
    if (!e->ranks || !e->seq_used || !e->seq_cap || (e->my_rank == 0 && (!e->gathered || !e->last_tok || !e->last_n || !e->hint || !e->last_hint))) {
        rc = g4_err_set(err, G4_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = kv_pool_setup(e, comms[0], err))) goto fail;
    if (e->mpi) {
        if (!(opts->isa && *opts->isa) && (rc = agree_on_isa(e, comms[0], err))) goto fail;
        if ((rc = rank_init(e, &e->ranks[0], e->my_rank, comms[0], dtype, err))) { g4_comm_fail(comms[0], err->msg); goto fail; }
        e->ranks[0].rank = e->my_rank;
    } else {
        pthread_barrier_init(&init_barrier, NULL, (unsigned)e->tp);
        for (int r = 1; r < e->tp; r++) {
            init_arg *ia = malloc(sizeof *ia);
            *ia = (init_arg){e, r, comms[r], dtype};
            if (pthread_create(&e->ranks[r].thread, NULL, local_rank_main, ia) != 0) {
                free(ia);
                rc = g4_err_set(err, G4_ENOMEM, "cannot start rank thread %d", r);
                /* cannot recover cleanly from a half-started group: abort the others */
                g4_comm_fail(comms[0], "startup failed");
                goto fail;
            }
            e->ranks[r].has_thread = 1;
        }
        rc = rank_init(e, &e->ranks[0], 0, comms[0], dtype, err);
        if (e->tp > 1) pthread_barrier_wait(&init_barrier);
        for (int r = 1; r < e->tp && rc == G4_OK; r++)
            if (e->ranks[r].rc) { rc = e->ranks[r].rc; *err = e->ranks[r].err; g4_err_prefix(err, "rank %d: ", r); }
        if (rc) e->closed = 1;
        if (e->tp > 1) pthread_barrier_wait(&init_barrier);
        pthread_barrier_destroy(&init_barrier);
        if (rc) goto fail;
    }
    if (e->my_rank == 0 && g4_model_source_has_vision(&e->src) &&
        (rc = g4_model_source_vision_create(&e->src, g4_kernels_math(e->K, e->math), &e->vision, err)))
        goto fail;
    if (e->my_rank == 0 && e->cfg->vision.has_vision && !e->vision) fprintf(stderr, "g4tp: %s\n", g4_model_source_vision_note(&e->src));
    for (int i = 0; i < e->cfg->n_eos && e->n_stop < 16; i++) e->stop_ids[e->n_stop++] = e->cfg->eos_ids[i];
    for (int i = 0; i < e->src.n_gen_eos && e->n_stop < 16; i++) {
        int dup = 0;
        for (int j = 0; j < e->n_stop; j++) dup |= e->stop_ids[j] == e->src.gen_eos[i];
        if (!dup) e->stop_ids[e->n_stop++] = e->src.gen_eos[i];
    }
    if (e->my_rank == 0 && e->o.kv_cache_dir && *e->o.kv_cache_dir && (rc = kv_disk_open(e, err))) {
        g4_engine_close(e);
        return rc;
    }
    *out = e;
    return G4_OK;
fail:
    e->closed = 1;
    if (e->ranks) {
        for (int r = 1; r < e->n_ranks_here && !e->mpi; r++)
            if (e->ranks[r].has_thread) pthread_join(e->ranks[r].thread, NULL);
        for (int r = 0; r < e->n_ranks_here; r++) rank_free(&e->ranks[r]);
    }
    for (int r = 0; r < (e->mpi ? 1 : e->tp); r++) g4_comm_free(comms[r]);
fail_early:
    if (e->mpi) {
        /* the other ranks may be waiting in a collective: end the whole job with our error */
        fprintf(stderr, "g4tp: rank %d: %s\n", e->my_rank, err->msg);
        g4_comm_mpi_abort(1);
    }
    free_engine(e);
    return rc;
}

void g4_engine_close(g4_engine *e) {
    if (!e) return;
    while (e->my_rank == 0 && !e->closed && g4_engine_kv_disk_step(e)) {} /* what is queued for the disk */
    if (e->my_rank == 0 && !e->closed && !atomic_load(&e->failed)) {
        cmd_hdr h = {CMD_STOP, 0, g4_comm_mpi_is_ending(), 0};
        g4_comm_broadcast(e->ranks[0].comm, &h, sizeof h, 0);
    }
    e->closed = 1;
    for (int r = 1; r < e->n_ranks_here; r++)
        if (e->ranks[r].has_thread) pthread_join(e->ranks[r].thread, NULL);
    g4_comm *comms[64];
    for (int r = 0; r < e->n_ranks_here; r++) {
        comms[r] = e->ranks[r].comm;
        rank_free(&e->ranks[r]);
    }
    for (int r = 0; r < e->n_ranks_here; r++) g4_comm_free(comms[r]);
    if (e->mpi) g4_comm_mpi_finalize();
    free_engine(e);
}

int g4_engine_follow(g4_engine *e, g4_err *err) {
    if (e->my_rank == 0) return g4_err_set(err, G4_EINVAL, "rank 0 leads; it does not follow");
    int rc = follow_loop(&e->ranks[0], err);
    e->closed = 1;
    return rc;
}

/* ---- leader API -------------------------------------------------------------------------- */

int g4_engine_rank(const g4_engine *e) { return e->my_rank; }
const char *g4_engine_failure(const g4_engine *e) {
    if (atomic_load(&e->failed)) return e->failure;
    return e->o.load_copy ? NULL : g4_mapfile_check(); /* the next step would fail with it */
}
int g4_engine_tp(const g4_engine *e) { return e->tp; }
int64_t g4_engine_vocab(const g4_engine *e) { return e->cfg->vocab_size; }
int64_t g4_engine_max_ctx(const g4_engine *e) { return e->o.max_ctx; }
int g4_engine_max_batch(const g4_engine *e) { return e->o.max_batch; }
int g4_engine_max_seqs(const g4_engine *e) { return e->o.max_seqs; }
const char *g4_engine_isa(const g4_engine *e) { return e->K->name; }
const char *g4_engine_model_dir(const g4_engine *e) { return e->model_dir; }
const struct g4_config *g4_engine_config(const g4_engine *e) { return e->cfg; }
size_t g4_engine_kv_bytes_used(const g4_engine *e) {
    g4_kv_stats st;
    g4_kvmgr_stats(e->kv, &st);
    return (size_t)(st.pages_total - st.pages_free - st.pages_cached) * (size_t)st.page_bytes;
}
size_t g4_engine_kv_budget(const g4_engine *e) { return e->kv_budget; }
const char *g4_engine_kv_budget_note(const g4_engine *e) { return e->kv_note; }
size_t g4_engine_weight_bytes(const g4_engine *e) {
    /* every rank reads its own slices once per token; MPI: ranks are near-equal, scale ours */
    size_t b = 0;
    for (int r = 0; r < e->n_ranks_here; r++) b += e->ranks[r].w.matrix_bytes;
    return e->mpi ? b * (size_t)e->tp : b;
}

/* The bytes the kernels read of a matrix: each row's, ld_bytes apart (a column slice of a
 * checkpoint's matrix is strided; an artifact's rows are back to back: one run). */
static g4_mem_region mat_region(const g4_mat *m) {
    const size_t rb = g4_dtype_row_bytes(m->dtype, m->cols);
    if ((size_t)m->ld_bytes == rb || m->col_parts > 1) return (g4_mem_region){m->data, rb * (size_t)m->rows, 1, 0};
    return (g4_mem_region){m->data, rb, (size_t)m->rows, (size_t)m->ld_bytes};
}

double g4_engine_weight_read_gbs(const g4_engine *e, int threads, int passes) {
    int cap = 1;
    for (int r = 0; r < e->n_ranks_here; r++) cap += 7 * e->cfg->n_layers + 1;
    g4_mem_region *reg = calloc((size_t)cap, sizeof *reg);
    if (!reg) return -1;
    int n = 0;
    for (int r = 0; r < e->n_ranks_here; r++) {
        const g4_rank_weights *w = &e->ranks[r].w;
        for (int l = 0; l < e->cfg->n_layers; l++) {
            const g4_layer_weights *L = &w->layers[l];
            const g4_mat *m[7] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
            for (int i = 0; i < 7; i++)
                if (m[i]->data) reg[n++] = mat_region(m[i]);
        }
        if (w->embed.data) reg[n++] = mat_region(&w->embed);
    }
    const double gbs = g4_probe_read_regions_gbs(threads, reg, n, passes);
    free(reg);
    return gbs;
}

int g4_engine_phase_times(const g4_engine *e, int rank, g4_phase_times *out, g4_err *err) {
    for (int r = 0; r < e->n_ranks_here; r++)
        if (e->ranks[r].rank == rank && e->ranks[r].m) {
            g4_rank_phase_times(e->ranks[r].m, out);
            return G4_OK;
        }
    return g4_err_set(err, G4_EINVAL, "rank %d is not a rank of this process", rank);
}

void g4_engine_phase_times_reset(g4_engine *e) {
    for (int r = 0; r < e->n_ranks_here; r++)
        if (e->ranks[r].m) g4_rank_phase_times_reset(e->ranks[r].m);
}

const char *g4_phase_name(int phase) {
    static const char *const names[G4_PHASE_COUNT] = {"qkv", "attention", "o_proj", "gate_up", "down_proj", "head", "allreduce", "other"};
    return phase >= 0 && phase < G4_PHASE_COUNT ? names[phase] : "?";
}

size_t g4_engine_copied_weight_bytes(const g4_engine *e) {
    size_t b = 0;
    for (int r = 0; r < e->n_ranks_here; r++) b += e->ranks[r].w.copied_bytes;
    return b;
}

int g4_engine_stop_ids(const g4_engine *e, int32_t *ids, int max) {
    int n = e->n_stop < max ? e->n_stop : max;
    memcpy(ids, e->stop_ids, sizeof(int32_t) * (size_t)n);
    return n;
}

size_t g4_engine_seq_bytes(const g4_engine *e, int64_t cap) {
    return (size_t)g4_kv_seq_pages(&e->geom, cap, e->o.max_batch + (int)e->kv_keep) * (size_t)e->geom.page_bytes;
}
int64_t g4_engine_kv_avail_pages(const g4_engine *e) { return g4_kvmgr_avail_pages(e->kv); }
int64_t g4_engine_kv_pages_to_grow(const g4_engine *e, int64_t len, int64_t n) { return g4_kvmgr_pages_to_grow(e->kv, len, n); }
void g4_engine_kv_stats(const g4_engine *e, g4_kv_stats *st) { g4_kvmgr_stats(e->kv, st); }
const char *g4_engine_kv_dtype(const g4_engine *e) { return g4_dtype_name(e->kv_dtype); }
const char *g4_engine_math(const g4_engine *e) { return g4_math_name(e->math); }
void g4_engine_prefix_clear(g4_engine *e) { g4_kvmgr_cache_clear(e->kv); }
int64_t g4_engine_prefix_peek(const g4_engine *e, const int32_t *tokens, int64_t n, int64_t *taken) {
    int64_t t;
    return g4_kvmgr_peek(e->kv, tokens, n, taken ? taken : &t);
}
int64_t g4_engine_seq_len(const g4_engine *e, int seq) {
    return seq >= 0 && seq < e->o.max_seqs && e->seq_used[seq] ? g4_kvmgr_len(e->kv, seq) : 0;
}

/* A free slot for a sequence of cap positions. */
static int seq_slot(g4_engine *e, int64_t cap, g4_err *err) {
    if (cap < 1 || cap > e->o.max_ctx)
        return -g4_err_set(err, G4_ECONTEXT, "a sequence of %lld positions exceeds the context limit of %lld", (long long)cap, (long long)e->o.max_ctx);
    for (int i = 0; i < e->o.max_seqs; i++)
        if (!e->seq_used[i]) return i;
    return -g4_err_set(err, G4_EBUSY, "all %d sequence slots are in use", e->o.max_seqs);
}

int g4_engine_seq_open(g4_engine *e, int64_t cap, int *seq, g4_err *err) {
    int64_t cached;
    return g4_engine_seq_open_cached(e, cap, NULL, 0, seq, &cached, err);
}

int g4_engine_seq_open_cached(g4_engine *e, int64_t cap, const int32_t *tokens, int64_t n, int *seq, int64_t *n_cached, g4_err *err) {
    *seq = -1;
    *n_cached = 0;
    int s = seq_slot(e, cap, err);
    if (s < 0) return -s;
    if (n > cap) n = cap;
    *n_cached = tokens && n > 0 ? g4_kvmgr_open_cached(e->kv, s, cap, tokens, n) : (g4_kvmgr_open(e->kv, s, cap), 0);
    e->seq_used[s] = 1;
    e->seq_cap[s] = cap;
    *seq = s;
    return g4_kvmgr_failed(e->kv) ? g4_err_set(err, G4_ECOMM, "sending KV ops to the ranks failed") : G4_OK;
}

void g4_engine_seq_close(g4_engine *e, int seq) {
    if (seq < 0 || seq >= e->o.max_seqs || !e->seq_used[seq]) return;
    /* what the slot held, for /slots and --kv-cache-dir */
    if (!e->last_tok[seq]) e->last_tok[seq] = malloc(sizeof(int32_t) * (size_t)e->o.max_ctx);
    e->last_n[seq] = e->last_tok[seq] ? g4_kvmgr_seq_tokens(e->kv, seq, e->last_tok[seq]) : 0;
    e->last_hint[seq] = e->hint[seq] > 0 ? e->hint[seq] : e->last_n[seq];
    e->hint[seq] = 0;
    if (e->kvd && e->last_n[seq] > 0) g4_kvdisk_queue(e->kvd, e->last_tok[seq], e->last_n[seq], e->last_hint[seq]);
    g4_kvmgr_close(e->kv, seq);
    e->seq_used[seq] = 0;
}

/* Every image block in the batch is whole in it: a token with span_end > 0 ends its block
 * there, and its sequence's tokens in the batch reach that far (a sequence's tokens in a step
 * are its next positions, in order). */
static int check_spans(const g4_batch *b, g4_err *err) {
    for (int i = 0; i < b->n; i++) {
        if (!b->span_end[i]) continue;
        int32_t last = -1;
        for (int j = 0; j < b->n; j++)
            if (b->seq[j] == b->seq[i] && b->pos[j] > last) last = b->pos[j];
        if (b->span_end[i] <= b->pos[i] || b->span_end[i] - 1 > last)
            return g4_err_set(err, G4_EINVAL, "token %d (position %d) names an image block ending at %d, which is not whole in the batch", i,
                              b->pos[i], b->span_end[i]);
    }
    return G4_OK;
}

int g4_engine_forward(g4_engine *e, const g4_batch *b, float *logits, g4_err *err) { return g4_engine_forward_ex(e, b, logits, NULL, err); }

int g4_engine_forward_ex(g4_engine *e, const g4_batch *b, float *logits, float *hidden, g4_err *err) {
    if (b->n < 1 || b->n > e->o.max_batch) return g4_err_set(err, G4_EINVAL, "batch of %d tokens (1..%d)", b->n, e->o.max_batch);
    rank_state *rs = &e->ranks[0];
    int n = b->n, n_logits = 0, rc0;
    for (int i = 0; i < n; i++) {
        if (b->seq[i] < 0 || b->seq[i] >= e->o.max_seqs || !e->seq_used[b->seq[i]])
            return g4_err_set(err, G4_EINVAL, "token %d names sequence %d, which is not open", i, b->seq[i]);
        if (b->pos[i] < 0 || b->pos[i] >= e->seq_cap[b->seq[i]])
            return g4_err_set(err, G4_ECONTEXT, "position %d is beyond the %lld positions of sequence %d", b->pos[i], (long long)e->seq_cap[b->seq[i]], b->seq[i]);
        if (b->ids[i] >= e->cfg->vocab_size || (b->ids[i] < 0 && !(b->embd && b->embd[i])))
            return g4_err_set(err, G4_EINVAL, "token id %d is outside the vocabulary (0..%lld)%s", b->ids[i], (long long)e->cfg->vocab_size - 1,
                              b->ids[i] < 0 ? " and has no embedding" : "");
        n_logits += b->logits[i] ? 1 : 0;
    }
    if (b->span_end && (rc0 = check_spans(b, err))) return rc0;
    /* blocks for the new positions (nothing changes when they are not there) */
    int rc = g4_kvmgr_prepare(e->kv, b, err);
    if (rc) return rc;
    memcpy(rs->payload, b->ids, sizeof(int32_t) * (size_t)n);
    memcpy(rs->payload + n, b->pos, sizeof(int32_t) * (size_t)n);
    memcpy(rs->payload + 2 * n, b->seq, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) rs->payload[3 * n + i] = b->logits[i] ? 1 : 0;
    for (int i = 0; i < n; i++) rs->payload[4 * n + i] = b->span_end ? b->span_end[i] : 0;
    int64_t n_ops;
    g4_kvmgr_ops(e->kv, &n_ops);
    e->embd = b->embd;
    rc = g4_kvmgr_failed(e->kv) ? g4_err_set(err, G4_ECOMM, "sending KV ops to the ranks failed") : lead(e, (cmd_hdr){CMD_FORWARD, n, n_ops, 0}, err);
    e->embd = NULL;
    g4_kvmgr_ops_clear(e->kv);
    if (rc) return rc;
    g4_kvmgr_commit(e->kv, b);
    if (hidden && n_logits) memcpy(hidden, g4_rank_hidden(rs->m), sizeof(float) * (size_t)n_logits * (size_t)e->cfg->hidden_size);
    const int64_t V = e->cfg->vocab_size;
    if (n_logits == 0) return G4_OK; /* logits may be NULL then */
    if (e->tp == 1) {
        memcpy(logits, rs->logits_local, sizeof(float) * (size_t)n_logits * (size_t)V);
    } else {
        for (int r = 0; r < e->tp; r++) {
            int64_t v0, nv;
            g4_tp_vocab_range(V, e->tp, r, &v0, &nv);
            const float *blk = e->gathered + (size_t)r * (size_t)n_logits * (size_t)e->max_nv;
            for (int k = 0; k < n_logits; k++) memcpy(logits + (size_t)k * V + v0, blk + (size_t)k * e->max_nv, sizeof(float) * (size_t)nv);
        }
    }
    return G4_OK;
}

const char *g4_engine_weight_dtype(const g4_engine *e) {
    const g4_rank_weights *w = &e->ranks[0].w;
    return w->layers ? g4_dtype_name(w->layers[0].gate.dtype) : "none";
}

/* ---- images -------------------------------------------------------------------------------- */

int g4_engine_has_vision(const g4_engine *e) { return e->vision != NULL; }

int g4_engine_encode_image(g4_engine *e, const float *pixels, const int32_t *pos, int ph, int pw, float *soft, g4_err *err) {
    if (!e->vision) {
        if (e->my_rank != 0) return g4_err_set(err, G4_EINVAL, "only the leader encodes images");
        return g4_err_set(err, G4_EUNSUPPORTED, "the model in %s cannot take images: %s", e->model_dir, g4_model_source_vision_note(&e->src));
    }
    if (atomic_load(&e->failed)) return g4_err_set(err, G4_ECOMM, "%s", e->failure);
    return g4_vision_encode(e->vision, e->ranks[0].pool, pixels, pos, ph, pw, soft, NULL, err);
}

/* ---- speculative decoding ------------------------------------------------------------------ */

const g4_spec_cfg *g4_engine_spec(const g4_engine *e) { return &e->spec; }
int64_t g4_engine_hidden_size(const g4_engine *e) { return e->cfg->hidden_size; }

void g4_engine_seq_tentative(g4_engine *e, int seq, int on) {
    if (seq >= 0 && seq < e->o.max_seqs && e->seq_used[seq]) g4_kvmgr_set_tentative(e->kv, seq, on);
}

int g4_engine_seq_truncate(g4_engine *e, int seq, int64_t len, const int32_t *tokens, g4_err *err) {
    if (seq < 0 || seq >= e->o.max_seqs || !e->seq_used[seq]) return g4_err_set(err, G4_EINVAL, "sequence %d is not open", seq);
    int rc = g4_kvmgr_truncate(e->kv, seq, len, tokens, err);
    return rc ? rc : g4_kvmgr_failed(e->kv) ? g4_err_set(err, G4_ECOMM, "sending KV ops to the ranks failed") : G4_OK;
}

int g4_engine_draft(g4_engine *e, int n, const int32_t *seq, const int32_t *tok, const float *hidden, int k, int32_t *drafts,
                    float *logits, g4_err *err) {
    rank_state *rs = &e->ranks[0];
    if (!rs->asst) return g4_err_set(err, G4_EINVAL, "the engine has no MTP assistant (--speculative mtp:DIR)");
    if (n < 1 || n > e->o.max_seqs) return g4_err_set(err, G4_EINVAL, "a draft for %d sequences (1..%d)", n, e->o.max_seqs);
    if (k < 1 || k > G4_SPEC_MAX_K) return g4_err_set(err, G4_EINVAL, "k = %d drafts (1..%d)", k, G4_SPEC_MAX_K);
    for (int i = 0; i < n; i++) {
        if (seq[i] < 0 || seq[i] >= e->o.max_seqs || !e->seq_used[seq[i]])
            return g4_err_set(err, G4_EINVAL, "draft %d names sequence %d, which is not open", i, seq[i]);
        const int64_t len = g4_kvmgr_len(e->kv, seq[i]);
        if (len < 1) return g4_err_set(err, G4_EINVAL, "sequence %d has no computed position to draft from", seq[i]);
        if (tok[i] < 0 || tok[i] >= e->cfg->vocab_size)
            return g4_err_set(err, G4_EINVAL, "token id %d is outside the vocabulary (0..%lld)", tok[i], (long long)e->cfg->vocab_size - 1);
        rs->dpay[i] = seq[i];
        rs->dpay[n + i] = (int32_t)len;
        rs->dpay[2 * n + i] = tok[i];
    }
    memcpy(rs->dhid, hidden, sizeof(float) * (size_t)n * (size_t)e->cfg->hidden_size);
    int64_t n_ops;
    g4_kvmgr_ops(e->kv, &n_ops);
    e->draft_logits = logits;
    int rc = g4_kvmgr_failed(e->kv) ? g4_err_set(err, G4_ECOMM, "sending KV ops to the ranks failed")
                                    : lead(e, (cmd_hdr){CMD_DRAFT, n, n_ops, k | (logits ? 1 << 8 : 0)}, err);
    g4_kvmgr_ops_clear(e->kv);
    e->draft_logits = NULL;
    if (rc) return rc;
    memcpy(drafts, rs->dids, sizeof(int32_t) * (size_t)n * (size_t)k);
    return G4_OK;
}

/* ---- the KV cache on disk (kvfile.h, kvdisk.h; docs/kvcache.md "On disk") ------------------------ */

/* What computed the KV rows: the model's files, the dtypes they are held in, the KV dtype, the TP
 * degree (each rank's file holds its heads), math, kernel set and numeric version. A row made
 * under any other identity may differ in its bits, so it is never used. Computed once. */
static int kv_identity(g4_engine *e, g4_err *err) {
    if (e->ident[0]) return G4_OK;
    uint64_t model;
    int rc = g4_kvfile_model_hash(e->model_dir, &model, err);
    if (rc) return rc;
    snprintf(e->ident, sizeof e->ident, "g4tp-kv numeric=%d model=%016llx weights=%s dtype=%s head=%s kv=%s tp=%d math=%s isa=%s ctx-block=%d",
             G4_KV_NUMERIC_VERSION, (unsigned long long)model, g4_engine_weight_dtype(e), e->o.dtype ? e->o.dtype : "stored",
             e->o.head_dtype ? e->o.head_dtype : "default", g4_dtype_name(e->kv_dtype), e->tp, g4_math_name(e->math), e->K->name, e->geom.bs);
    e->identity = XXH64(e->ident, strlen(e->ident), 0);
    return G4_OK;
}

/* Runs one file request on every rank. G4_OK with *bad = -1 when every rank did its part, else
 * the first rank that did not and its reason in *why; a failed collective fails the group. */
static int disk_all(g4_engine *e, int sub, int seq, int64_t total, int64_t slide_from, int64_t p0, int64_t p1, const char *stem, int *bad,
                    g4_err *why, g4_err *err) {
    rank_state *rs = &e->ranks[0];
    rs->disk = (disk_req){sub, seq, total, slide_from, p0, p1, e->identity, {0}};
    snprintf(rs->disk.stem, sizeof rs->disk.stem, "%s", stem);
    int64_t n_ops;
    g4_kvmgr_ops(e->kv, &n_ops);
    int rc = g4_kvmgr_failed(e->kv) ? g4_err_set(err, G4_ECOMM, "sending KV ops to the ranks failed") : lead(e, (cmd_hdr){CMD_KV_DISK, sub, n_ops, 0}, err);
    g4_kvmgr_ops_clear(e->kv);
    *bad = -1;
    if (rc) return rc;
    for (int r = 0; r < e->tp && *bad < 0; r++) {
        if (!e->disk_rc[r]) continue;
        *bad = r;
        if (!e->mpi) *why = e->ranks[r].disk_err;
        else if (r == 0) *why = rs->disk_err;
        else g4_err_set(why, e->disk_rc[r], "rank %d could not do its part (its log says why)", r);
    }
    return G4_OK;
}

/* A sequence slot for the disk's own use, opened on the cached prefix of tok[0..n); *P: its length. */
static int disk_seq(g4_engine *e, const int32_t *tok, int64_t n, int64_t *P, g4_err *err) {
    const int s = seq_slot(e, n, err);
    if (s < 0) return s;
    *P = g4_kvmgr_open_cached(e->kv, s, n, tok, n);
    e->seq_used[s] = 1;
    e->seq_cap[s] = n;
    return s;
}

static void disk_seq_close(g4_engine *e, int s) {
    g4_kvmgr_close(e->kv, s);
    e->seq_used[s] = 0;
}

static int disk_ready(g4_engine *e, g4_err *err) {
    if (e->my_rank != 0) return g4_err_set(err, G4_EINVAL, "only the leader reads and writes KV files");
    if (atomic_load(&e->failed)) return g4_err_set(err, e->failure_code, "%s", e->failure);
    g4_kv_stats st;
    g4_kvmgr_stats(e->kv, &st);
    if (!st.prefix_cache) return g4_err_set(err, G4_EUNSUPPORTED, "the prefix cache is off (--no-prefix-cache): there is no KV cache to save or load");
    return kv_identity(e, err);
}

/* Writes the cached prefix of tok[0..n) under stem (NULL: --kv-cache-dir's name for it, and only
 * when it is long enough and not there yet). */
static int save_prefix(g4_engine *e, const char *stem, const int32_t *tok, int64_t n, int64_t from, int64_t *n_saved, g4_err *err) {
    *n_saved = 0;
    int rc = disk_ready(e, err);
    if (rc) return rc;
    if (!tok || n < 1) return g4_err_set(err, G4_EINVAL, "no tokens to save");
    const int64_t m = n < e->o.max_ctx ? n : e->o.max_ctx - 1;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(m + 1));
    if (!t) return g4_err_set(err, G4_ENOMEM, "out of memory");
    memcpy(t, tok, sizeof(int32_t) * (size_t)m);
    t[m] = 0; /* the hit leaves one token to compute: this one, so all m can be cached */
    int64_t P = 0;
    const int s = disk_seq(e, t, m + 1, &P, err);
    if (s < 0) { free(t); return -s; }
    /* --kv-cache-dir's own writes (no stem given) skip what is too short, already there, or
     * larger than the whole budget, and make room by evicting the least recently used */
    const int automatic = !stem;
    char auto_stem[4200];
    int write = P > 0, bad = -1;
    g4_err why = {0};
    const int64_t slide_from = write ? g4_kvmgr_attach_slides(e->kv, s, from > 0 && from < P ? from : P) : 0;
    const uint64_t need = write ? (uint64_t)e->tp * g4_kvfile_rank_bytes(&e->geom, P, slide_from) + 64 + strlen(e->ident) + 4 * (uint64_t)P : 0;
    if (automatic && write) {
        g4_kvdisk_stem(e->kvd, t, P, auto_stem, sizeof auto_stem);
        stem = auto_stem;
        write = P >= e->o.kv_cache_min_tokens && need <= (uint64_t)e->o.kv_cache_dir_bytes && !g4_kvdisk_touch(e->kvd, auto_stem);
        for (const char *v; write && rc == G4_OK && (v = g4_kvdisk_victim(e->kvd, need));) {
            char victim[4200];
            snprintf(victim, sizeof victim, "%s", v);
            rc = disk_all(e, DISK_DROP, 0, 0, 0, 0, 0, victim, &bad, &why, err);
            g4_kvdisk_unlink(victim);
            g4_kvdisk_forget(e->kvd, victim);
            g4_kvdisk_count(e->kvd, 0, 0, 0, 0, 1);
        }
    }
    if (rc == G4_OK && write) {
        rc = disk_all(e, DISK_SAVE, s, P, slide_from, 0, P, stem, &bad, &why, err);
        if (rc == G4_OK && bad < 0 && g4_kvfile_write_meta(stem, e->identity, e->ident, e->tp, slide_from, t, P, &why)) bad = 0;
        if (rc == G4_OK && bad >= 0) { /* whatever part was written goes */
            g4_err ignore;
            int b2;
            rc = disk_all(e, DISK_DROP, 0, 0, 0, 0, 0, stem, &b2, &ignore, err);
            g4_kvdisk_unlink(stem);
        }
    }
    disk_seq_close(e, s);
    free(t);
    if (rc) return rc;
    if (bad >= 0) {
        if (e->kvd) g4_kvdisk_count(e->kvd, 0, 1, 0, 0, 0);
        return g4_err_set(err, why.code ? why.code : G4_EIO, "%s", why.msg);
    }
    if (P == 0) return g4_err_set(err, G4_ENOTFOUND, "no prefix of these %lld tokens is in the KV cache", (long long)n);
    if (automatic && write) {
        g4_kvdisk_added(e->kvd, stem, need);
        g4_kvdisk_count(e->kvd, 1, 0, 0, 0, 0);
    }
    *n_saved = write ? P : 0;
    return G4_OK;
}

int g4_engine_kv_save(g4_engine *e, const char *stem, const int32_t *tokens, int64_t n, int64_t *n_saved, g4_err *err) {
    if (!stem || !*stem) return g4_err_set(err, G4_EINVAL, "no file name to save the KV cache to");
    return save_prefix(e, stem, tokens, n, n, n_saved, err);
}

int g4_engine_kv_save_from(g4_engine *e, const char *stem, const int32_t *tokens, int64_t n, int64_t from, int64_t *n_saved, g4_err *err) {
    if (!stem || !*stem) return g4_err_set(err, G4_EINVAL, "no file name to save the KV cache to");
    return save_prefix(e, stem, tokens, n, from, n_saved, err);
}

/* Pages a prefix of P positions holds (its full blocks and the window from slide_from). */
static int64_t entry_pages(const g4_engine *e, int64_t P, int64_t slide_from) {
    const int64_t bs = e->geom.bs, nb = (P + bs - 1) / bs;
    return nb * e->geom.ng[G4_KV_FULL] + (nb - slide_from / bs) * e->geom.ng[G4_KV_SLIDE];
}

/* only_free: refuse (G4_ENOMEM) when the pool's free pages would not hold it (at start: what is
 * loaded first must not be evicted by what comes after). */
static int load_prefix(g4_engine *e, const char *stem, int only_free, int64_t *n_loaded, int64_t *n_tokens, g4_err *err) {
    *n_loaded = 0;
    if (n_tokens) *n_tokens = 0;
    int rc = disk_ready(e, err);
    if (rc) return rc;
    char meta[4300];
    snprintf(meta, sizeof meta, "%s" G4_KVFILE_META_EXT, stem);
    int32_t *tok = NULL;
    int64_t P = 0, slide_from = 0;
    if ((rc = g4_kvfile_read_meta(meta, e->identity, e->tp, &tok, &P, &slide_from, err))) return rc;
    if (n_tokens) *n_tokens = P;
    if (slide_from < 0 || slide_from % e->geom.bs || slide_from > g4_kvmgr_slide_from(e->kv, P)) {
        free(tok);
        return g4_err_set(err, G4_EFORMAT, "%s: its sliding rows start at %lld, a hit at its end needs them from %lld", meta, (long long)slide_from,
                          (long long)g4_kvmgr_slide_from(e->kv, P));
    }
    g4_kv_stats st;
    g4_kvmgr_stats(e->kv, &st);
    if (P + 1 > e->o.max_ctx || (only_free && entry_pages(e, P, slide_from) > st.pages_free)) {
        free(tok);
        return g4_err_set(err, P + 1 > e->o.max_ctx ? G4_ECONTEXT : G4_ENOMEM, "%s: %lld positions do not fit %s", meta, (long long)P,
                          P + 1 > e->o.max_ctx ? "--max-ctx" : "the KV pool's free pages");
    }
    int64_t done = 0;
    const int s = disk_seq(e, tok, P, &done, err);
    if (s < 0) { free(tok); return -s; }
    g4_kvmgr_set_restore(e->kv, s, slide_from);
    const int mb = e->o.max_batch;
    int32_t *pos = malloc(sizeof(int32_t) * 2 * (size_t)mb);
    uint8_t *flags = calloc((size_t)mb, 1);
    int bad = -1;
    g4_err why = {0};
    if (!pos || !flags) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    while (rc == G4_OK && bad < 0 && done < P) {
        const int n = (int)(P - done < mb ? P - done : mb);
        for (int i = 0; i < n; i++) { pos[i] = (int32_t)(done + i); pos[mb + i] = s; }
        const g4_batch b = {n, tok + done, pos, pos + mb, flags, NULL, NULL};
        if (g4_kvmgr_prepare(e->kv, &b, &why)) { bad = 0; break; }
        rc = disk_all(e, DISK_LOAD, s, P, slide_from, done, done + n, stem, &bad, &why, err);
        if (rc) break;
        if (bad >= 0) g4_kvmgr_unprepare(e->kv, s);
        else { g4_kvmgr_commit(e->kv, &b); done += n; }
    }
    if (rc == G4_OK) disk_seq_close(e, s);
    free(pos);
    free(flags);
    free(tok);
    if (rc) return rc;
    if (bad >= 0) return g4_err_set(err, why.code ? why.code : G4_EIO, "%s", why.msg);
    *n_loaded = P;
    if (e->kvd) g4_kvdisk_count(e->kvd, 0, 0, P, 0, 0);
    return G4_OK;
}

int g4_engine_kv_load(g4_engine *e, const char *stem, int64_t *n_loaded, int64_t *n_tokens, g4_err *err) {
    if (!stem || !*stem) return g4_err_set(err, G4_EINVAL, "no file name to load the KV cache from");
    return load_prefix(e, stem, 0, n_loaded, n_tokens, err);
}

const int32_t *g4_engine_seq_last(const g4_engine *e, int seq, int64_t *n) {
    *n = 0;
    if (e->my_rank != 0 || seq < 0 || seq >= e->o.max_seqs || !e->last_tok[seq]) return NULL;
    *n = e->last_n[seq];
    return *n ? e->last_tok[seq] : NULL;
}

void g4_engine_seq_hint(g4_engine *e, int seq, int64_t prompt_len) {
    if (e->my_rank == 0 && seq >= 0 && seq < e->o.max_seqs) e->hint[seq] = prompt_len;
}

int64_t g4_engine_seq_last_hint(const g4_engine *e, int seq) { return e->my_rank == 0 && seq >= 0 && seq < e->o.max_seqs ? e->last_hint[seq] : 0; }

void g4_engine_seq_forget(g4_engine *e, int seq, int64_t *n) {
    g4_engine_seq_last(e, seq, n);
    if (*n) e->last_n[seq] = 0;
}

int g4_engine_seq_open_now(const g4_engine *e, int seq) { return seq >= 0 && seq < e->o.max_seqs && e->seq_used[seq]; }

int g4_engine_kv_disk_step(g4_engine *e) {
    if (!e->kvd || e->my_rank != 0 || atomic_load(&e->failed)) return 0;
    int64_t n, hint;
    int32_t *t = g4_kvdisk_pop(e->kvd, &n, &hint);
    if (!t) return 0;
    int64_t saved;
    g4_err err;
    if (save_prefix(e, NULL, t, n, hint, &saved, &err) && err.code != G4_ENOTFOUND) fprintf(stderr, "g4tp: --kv-cache-dir: not written: %s\n", err.msg);
    free(t);
    return 1;
}

void g4_engine_kv_disk_stats(const g4_engine *e, g4_kv_disk_stats *st) {
    memset(st, 0, sizeof *st);
    if (!e->kvd) return;
    g4_kvdisk_stats d;
    g4_kvdisk_get_stats(e->kvd, &d);
    *st = (g4_kv_disk_stats){1, d.entries, d.bytes, d.budget, d.saved, d.save_failed, d.loaded_tokens, d.refused, d.evicted};
}

/* --kv-cache-dir at start: this identity's entries, newest first, into the prefix cache while
 * the pool's free pages hold them; refused ones (damaged, truncated, another version) are removed. */
static int kv_disk_open(g4_engine *e, g4_err *err) {
    if (e->o.kv_cache_dir_bytes <= 0) e->o.kv_cache_dir_bytes = (int64_t)10240 << 20;
    if (e->o.kv_cache_min_tokens <= 0) e->o.kv_cache_min_tokens = 256;
    int rc = disk_ready(e, err);
    if (rc) {
        g4_err_prefix(err, "--kv-cache-dir: ");
        return rc;
    }
    if ((rc = g4_kvdisk_open(e->o.kv_cache_dir, e->identity, (uint64_t)e->o.kv_cache_dir_bytes, e->o.kv_cache_min_tokens, &e->kvd, err))) return rc;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int loaded = 0, refused = 0, skipped = 0;
    int64_t positions = 0;
    for (int i = 0; g4_kvdisk_entry(e->kvd, i);) {
        char stem[4200];
        snprintf(stem, sizeof stem, "%s", g4_kvdisk_entry(e->kvd, i));
        int64_t n;
        g4_err why;
        rc = load_prefix(e, stem, 1, &n, NULL, &why);
        if (atomic_load(&e->failed)) return g4_err_set(err, e->failure_code, "%s", e->failure);
        if (rc == G4_OK) { loaded++; positions += n; i++; continue; }
        if (rc == G4_ENOMEM || rc == G4_ECONTEXT) { skipped++; i++; continue; }
        fprintf(stderr, "g4tp: --kv-cache-dir: refused (removed): %s\n", why.msg);
        int bad;
        g4_err ignore;
        if ((rc = disk_all(e, DISK_DROP, 0, 0, 0, 0, 0, stem, &bad, &ignore, err))) return rc;
        g4_kvdisk_unlink(stem);
        g4_kvdisk_forget(e->kvd, stem);
        refused++;
    }
    g4_kvdisk_count(e->kvd, 0, 0, 0, refused, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    g4_kvdisk_stats st;
    g4_kvdisk_get_stats(e->kvd, &st);
    fprintf(stderr, "g4tp: --kv-cache-dir %s: %d prefixes (%lld positions) read into the prefix cache in %.2f s; %d refused; %d left on disk (no room "
            "now); %lld entries, %llu of %llu MiB\n", e->o.kv_cache_dir, loaded, (long long)positions,
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), refused, skipped, (long long)st.entries,
            (unsigned long long)(st.bytes >> 20), (unsigned long long)(st.budget >> 20));
    return G4_OK;
}
