/* artifact.c — writes and reads g4tp per-rank artifact folders (see artifact.h and
 * docs/artifacts.md for the byte layout). Owns the rank-file format, the manifest, the atomic
 * publish of a folder and all checks on load. Knows the tensor table and the TP split rules only
 * through model/tensors.h and model/split.h; knows nothing of the forward pass or the engine. */
#include "model/artifact.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "model/matconv.h"
#include "model/checkpoint.h"
#include "model/split.h"

#define CHUNK_BYTES ((size_t)8 << 20) /* the bounded streaming buffer */

static const char *const side_files[] = {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                          "generation_config.json", "processor_config.json"};

void g4_artifact_rank_name(int rank, int tp, char *buf, size_t len) {
    snprintf(buf, len, "rank-%05d-of-%05d.g4w", rank, tp);
}

static uint64_t align_up(uint64_t x) { return (x + G4_ART_ALIGN - 1) / G4_ART_ALIGN * G4_ART_ALIGN; }

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

static void hex64(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }
static int parse_hex64(const char *s, uint64_t *v) {
    if (!s || strlen(s) != 16) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 16);
    if (errno || *end) return 0;
    *v = x;
    return 1;
}

/* Canonical text of a JSON value (sorted keys, compact): what the checksums cover. */
static char *canonical(const json_t *j) { return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY); }

static uint64_t canonical_hash(const json_t *j) {
    char *s = canonical(j);
    uint64_t h = s ? XXH3_64bits(s, strlen(s)) : 0;
    free(s);
    return h;
}

/* Checksum of a manifest: its canonical text without the "manifest_xxh3" member. */
static uint64_t manifest_hash(const json_t *m) {
    json_t *c = json_deep_copy(m);
    json_object_del(c, "manifest_xxh3");
    uint64_t h = canonical_hash(c);
    json_decref(c);
    return h;
}

int g4_artifact_is_dir(const char *dir) {
    char *p = g4_path_join(dir, "manifest.json");
    int r = g4_file_exists(p);
    free(p);
    return r;
}

int g4_artifact_manifest_tp(const char *dir) {
    char *p = g4_path_join(dir, "manifest.json");
    json_t *m = json_load_file(p, 0, NULL);
    free(p);
    json_t *t = json_object_get(m, "tp");
    int tp = json_is_integer(t) && json_integer_value(t) > 0 && json_integer_value(t) <= 4096 ? (int)json_integer_value(t) : 0;
    json_decref(m);
    return tp;
}

/* ---- layout shared by the writer and the reader ------------------------------------------ */

/* Dtype a table entry has in an artifact made with `req` from a checkpoint tensor of `stored`. */
static int entry_dtype(const g4_tensor_spec *s, int stored, g4_dtype_req req) {
    return g4_tensor_dtype_for(s->kind, stored, req);
}

static int is_block(int dt) { return g4_dtype_info(dt) && g4_dtype_info(dt)->quantized; }

/* The version a folder is written as: 6 only when some q8_0 entry is in column parts, else 5 only
 * when some grouped q4_0 entry has its partial groups in the tail layout, else 4 only when some
 * entry is in column parts, else 3 only when rank 0 carries the vision tower, so other folders
 * stay readable by older builds. */
static int write_version(int n_vision, int col_parts, int q4_tail, int q8_parts) {
    return q8_parts ? 6 : q4_tail ? 5 : col_parts ? 4 : n_vision ? 3 : 2;
}

static void encode_header(uint8_t *h, int tp, int rank, int n, uint64_t file_size, uint64_t cfg_hash, int dtype, int version) {
    memset(h, 0, G4_ART_HEADER_BYTES);
    memcpy(h, G4_ART_MAGIC, 8);
    put32(h + 8, (uint32_t)version);
    put32(h + 12, (uint32_t)tp);
    put32(h + 16, (uint32_t)rank);
    put32(h + 20, (uint32_t)n);
    put64(h + 24, (uint64_t)G4_ART_HEADER_BYTES + (uint64_t)n * G4_ART_ENTRY_BYTES);
    put64(h + 32, file_size);
    put64(h + 40, cfg_hash);
    put32(h + 48, (uint32_t)(int32_t)dtype);
    put32(h + 52, G4_ART_ALIGN);
}

static void encode_entry(uint8_t *p, const g4_art_entry *e) {
    memset(p, 0, G4_ART_ENTRY_BYTES);
    memcpy(p, e->name, strnlen(e->name, G4_ART_NAME_MAX - 1));
    put16(p + 96, (uint16_t)e->dtype);
    put16(p + 98, (uint16_t)(e->col_parts > 1 ? e->col_parts : 0));
    put32(p + 100, (uint32_t)e->q4_group_cols);
    put64(p + 104, (uint64_t)e->rows);
    put64(p + 112, (uint64_t)e->cols);
    put64(p + 120, e->offset);
    put64(p + 128, e->nbytes);
    put64(p + 136, e->xxh3);
}

static void decode_entry(const uint8_t *p, g4_art_entry *e) {
    memcpy(e->name, p, G4_ART_NAME_MAX);
    e->name[G4_ART_NAME_MAX - 1] = 0;
    e->dtype = (int)get16(p + 96);
    e->col_parts = (int)get16(p + 98); /* 0 before version 4 (the dtype's high bytes) */
    e->q4_group_cols = (int64_t)get32(p + 100);
    e->rows = (int64_t)get64(p + 104);
    e->cols = (int64_t)get64(p + 112);
    e->offset = get64(p + 120);
    e->nbytes = get64(p + 128);
    e->xxh3 = get64(p + 136);
}

/* ---- writing ------------------------------------------------------------------------------ */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}
static void remove_tree(const char *path) { nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static int fsync_path(const char *path, int dir) {
    int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Lets the kernel drop pages of the source map we are done with (keeps RSS flat: the pages
 * stay in the page cache, only this process's mapping of them goes). */
static void release_pages(const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p / (uintptr_t)pg * (uintptr_t)pg;
    uintptr_t b = (uintptr_t)p + n;
    madvise((void *)a, b - a, MADV_DONTNEED);
}

typedef struct {
    const g4_shard_opts *o;
    g4_checkpoint ck;
    g4_tp_plan *plans;
    g4_art_entry **ents;   /* [tp][n_specs], rank 0: then the nv vision entries */
    int nv;                /* vision tensors in rank 0's file (0: none) */
    int col_parts;         /* some q4_0 entry is stored in column parts (format version 4) */
    int q4_tail;           /* some grouped entry's partial groups are in the tail layout (version 5) */
    int q8_parts;          /* some q8_0 entry is stored in column parts (version 6) */
    uint64_t *fsize;       /* [tp] */
    int *fds;              /* [tp] */
    char *tmp;
    uint8_t *buf;
    uint64_t done, total;
    g4_dtype_req req;
    double *err2, *ref2;   /* [n_specs] squared quantization error and reference, per tensor */
} shard_ctx;

static int canceled(const shard_ctx *c) { return c->o->cancel && *c->o->cancel; }

/* Quantization error of one converted chunk, summed per tensor for the shard report. */
static void add_error(shard_ctx *c, int i, const g4_mat *src, const void *conv, int dt) {
    if (!is_block(dt) || !c->err2) return;
    float *a = malloc(sizeof(float) * (size_t)src->cols * 2);
    if (!a) return;
    float *b = a + src->cols;
    size_t rb = g4_dtype_row_bytes(dt, src->cols);
    for (int64_t r = 0; r < src->rows; r++) {
        g4_mat_row_to_f32(src, r, a);
        g4_kernels_scalar.row_to_f32(b, (const uint8_t *)conv + (size_t)r * rb, dt, src->cols);
        for (int64_t k = 0; k < src->cols; k++) {
            c->err2[i] += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
            c->ref2[i] += (double)a[k] * a[k];
        }
    }
    free(a);
}

/* Streams `whole` (the map's view of a tensor's rectangle, or of one of its column parts) into
 * entry e of rank r's file at *offp (advanced), hashed into st; i: the text table index the
 * quantization error is summed under (-1: none). */
static int write_view(shard_ctx *c, int r, g4_art_entry *e, const g4_mat whole, const char *name, int i, XXH3_state_t *st,
                      uint64_t *offp, g4_err *err) {
    const int64_t nr = whole.rows, nc = whole.cols;
    const int direct = whole.dtype == e->dtype; /* same bytes: copied, else converted */
    size_t src_rb = direct ? g4_dtype_row_bytes(whole.dtype, nc) : (size_t)nc * 4, dst_rb = g4_dtype_row_bytes(e->dtype, nc);
    size_t max_rb = src_rb > dst_rb ? src_rb : dst_rb;
    int64_t chunk = (int64_t)(CHUNK_BYTES / max_rb);
    if (chunk < 1) chunk = 1;
    uint64_t off = *offp;
    for (int64_t row = 0; row < nr; row += chunk) {
        if (canceled(c)) return g4_err_set(err, G4_ECANCELED, "interrupted");
        int64_t m = nr - row < chunk ? nr - row : chunk;
        g4_mat v = g4_mat_rows(&whole, row, m);
        const uint8_t *src = v.data;
        const void *out = c->buf;
        void *conv = NULL;
        size_t bytes = (size_t)m * dst_rb;
        if (direct) {
            if (src_rb == (size_t)v.ld_bytes) out = src; /* whole rows: contiguous in the map */
            else for (int64_t k = 0; k < m; k++) memcpy(c->buf + (size_t)k * src_rb, src + (size_t)k * v.ld_bytes, src_rb);
        } else {
            size_t nb;
            int rc = g4_mat_convert(&v, e->dtype, &conv, &nb, err);
            if (rc) return g4_err_prefix(err, "%s: ", name), rc;
            out = conv;
            if (v.dtype != G4_DT_CT_INT4 && i >= 0) add_error(c, i, &v, conv, e->dtype);
        }
        if (e->q4_group_cols) { /* the kernels' layout, row by row (the error was measured on the blocks) */
            uint8_t *g = conv ? conv : c->buf;
            if (out != g) memcpy(g, out, bytes);
            const size_t sb = g4_dtype_row_bytes(G4_DT_Q4_0, e->q4_group_cols);
            for (int64_t k = 0; k < m; k++)
                for (int64_t col = 0; col < nc; col += e->q4_group_cols)
                    g4_q4_0_group_row(g + (size_t)k * dst_rb + (size_t)(col / e->q4_group_cols) * sb, e->q4_group_cols / G4_Q4_BLOCK, c->q4_tail);
            out = g;
        }
        XXH3_64bits_update(st, out, bytes);
        int w = pwrite_all(c->fds[r], out, bytes, off);
        int en = errno;
        free(conv);
        release_pages(src, (size_t)(m - 1) * (size_t)v.ld_bytes + g4_mat_src_row_bytes(&v));
        if (v.scales) release_pages(v.scales, (size_t)m * (size_t)v.scales_ld);
        if (w) return g4_err_set(err, G4_EIO, "writing %s of rank %d: %s", name, r, strerror(en));
        off += bytes;
        c->done += bytes;
        if (c->o->progress) c->o->progress(c->o->progress_ud, c->done, c->total);
    }
    *offp = off;
    return G4_OK;
}

/* An entry written from one view. */
static int write_entry(shard_ctx *c, int r, g4_art_entry *e, const g4_mat whole, const char *name, int i, g4_err *err) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint64_t off = e->offset;
    const int rc = write_view(c, r, e, whole, name, i, &st, &off, err);
    e->xxh3 = XXH3_64bits_digest(&st);
    return rc;
}

/* The rank's rectangle of text tensor i. */
static int write_slice(shard_ctx *c, int r, int i, g4_err *err) {
    const g4_tensor_spec *s = &c->ck.specs[i];
    int64_t r0, nr, c0, nc;
    g4_tp_tensor_slice(&c->ck.cfg, &c->plans[r], s, &r0, &nr, &c0, &nc);
    if (s->ndim == 1) { r0 = 0; c0 = 0; nc = 1; }
    g4_art_entry *e = &c->ents[r][i];
    const int parts = e->col_parts > 1 ? e->col_parts : 1; /* column parts (kernels.h): part after part */
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint64_t off = e->offset;
    int rc = G4_OK;
    for (int p = 0; p < parts && rc == G4_OK; p++)
        rc = write_view(c, r, e, g4_checkpoint_view(&c->ck, i, r0, nr, c0 + p * (nc / parts), nc / parts), s->name, i, &st, &off, err);
    e->xxh3 = XXH3_64bits_digest(&st);
    return rc;
}

/* Copies a small side file (tokenizer, template...) into the temp folder; fills size and hash. */
static int copy_side(shard_ctx *c, const char *name, uint64_t *size, uint64_t *hash, g4_err *err) {
    char *src = g4_path_join(c->o->model_dir, name), *dst = g4_path_join(c->tmp, name);
    int rc = G4_OK;
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    if (!in || !out) rc = g4_err_set(err, G4_EIO, "copying %s: %s", in ? dst : src, strerror(errno));
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    *size = 0;
    size_t n;
    while (rc == G4_OK && (n = fread(c->buf, 1, CHUNK_BYTES, in)) > 0) {
        XXH3_64bits_update(&st, c->buf, n);
        *size += n;
        if (fwrite(c->buf, 1, n, out) != n) rc = g4_err_set(err, G4_EIO, "writing %s: %s", dst, strerror(errno));
    }
    if (rc == G4_OK && in && ferror(in)) rc = g4_err_set(err, G4_EIO, "reading %s", src);
    if (out && fflush(out) == 0) fsync(fileno(out));
    if (out && fclose(out) != 0 && rc == G4_OK) rc = g4_err_set(err, G4_EIO, "writing %s: %s", dst, strerror(errno));
    if (in) fclose(in);
    *hash = XXH3_64bits_digest(&st);
    free(src);
    free(dst);
    return rc;
}

static json_t *build_manifest(shard_ctx *c, json_t *config, json_t *files) {
    const g4_shard_opts *o = c->o;
    json_t *m = json_object();
    json_object_set_new(m, "format", json_string("g4tp-artifact"));
    json_object_set_new(m, "format_version", json_integer(write_version(c->nv, c->col_parts, c->q4_tail, c->q8_parts)));
    json_object_set_new(m, "tp", json_integer(o->tp));
    json_object_set_new(m, "dtype", json_string(o->dtype >= 0 ? g4_dtype_name(o->dtype) : "as-stored"));
    for (int i = 0; i < c->ck.n_specs; i++) /* informational: what the tied head was made */
        if (c->ck.specs[i].kind == G4_T_EMBED) json_object_set_new(m, "head_dtype", json_string(g4_dtype_name(c->ents[0][i].dtype)));
    int q4 = 0, grouped = 0; /* informational: how the q4_0 matrices are laid out */
    for (int r = 0; r < o->tp; r++)
        for (int i = 0; i < c->ck.n_specs; i++) q4 |= c->ents[r][i].dtype == G4_DT_Q4_0, grouped |= c->ents[r][i].q4_group_cols > 0;
    if (q4) json_object_set_new(m, "q4_layout", json_string(grouped ? "grouped" : "blocks"));
    if (c->q4_tail) json_object_set_new(m, "q4_tail", json_true()); /* informational: version 5 */
    /* informational: the widest column part asked for, by dtype */
    const int64_t pc = o->rowpar_part_cols;
    if (c->col_parts) json_object_set_new(m, "q4_rowpar_part_cols", json_integer(pc > 0 ? pc : G4_ROWPAR_PART_COLS));
    if (c->q8_parts) json_object_set_new(m, "q8_rowpar_part_cols", json_integer(pc > 0 ? pc : G4_ROWPAR_PART_COLS_Q8));
    json_object_set_new(m, "alignment", json_integer(G4_ART_ALIGN));
    json_object_set_new(m, "n_tensors", json_integer(c->ck.n_specs));
    if (c->nv) json_object_set_new(m, "vision_tensors", json_integer(c->nv)); /* after the text ones, in rank 0's file */
    json_object_set(m, "config", config);
    json_t *ranks = json_array();
    for (int r = 0; r < o->tp; r++) {
        char name[64], hx[17];
        g4_artifact_rank_name(r, o->tp, name, sizeof name);
        json_t *f = json_object();
        json_object_set_new(f, "file", json_string(name));
        json_object_set_new(f, "rank", json_integer(r));
        json_object_set_new(f, "size", json_integer((json_int_t)c->fsize[r]));
        json_object_set_new(f, "header_bytes", json_integer(G4_ART_HEADER_BYTES + (json_int_t)(c->ck.n_specs + (r ? 0 : c->nv)) * G4_ART_ENTRY_BYTES));
        /* filled in by the caller once the header is written */
        hex64(0, hx);
        json_object_set_new(f, "header_xxh3", json_string(hx));
        json_array_append_new(ranks, f);
    }
    json_object_set_new(m, "ranks", ranks);
    json_object_set(m, "files", files);
    return m;
}

static int publish(const char *tmp, const char *out, int exists, g4_err *err) {
    if (!exists) {
        if (rename(tmp, out) != 0) return g4_err_set(err, G4_EIO, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
        return G4_OK;
    }
    /* atomic replacement: swap the two folders, then delete the old one (now at tmp) */
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) != 0)
        return g4_err_set(err, G4_EIO, "cannot replace %s atomically: %s", out, strerror(errno));
    remove_tree(tmp);
    return G4_OK;
}

static int parent_fsync(const char *out) {
    char *d = strdup(out);
    char *sl = strrchr(d, '/');
    if (sl == d) sl[1] = 0; else if (sl) *sl = 0; else strcpy(d, ".");
    int r = fsync_path(d, 1);
    free(d);
    return r;
}

int g4_artifact_shard(const g4_shard_opts *o, g4_err *err) {
    shard_ctx c = {0};
    c.o = o;
    int rc = G4_OK;
    char *out = NULL;
    json_t *config = NULL, *files = NULL, *man = NULL;
    if (!o->model_dir || !o->out_dir || !*o->out_dir) return g4_err_set(err, G4_EINVAL, "shard needs a model folder and an output folder");
    if (o->dtype < -1 || o->dtype >= G4_DT_COUNT) return g4_err_set(err, G4_EINVAL, "unknown dtype %d", o->dtype);
    c.req = (g4_dtype_req){o->dtype, -1};
    if (o->head_dtype && *o->head_dtype && (c.req.head = g4_dtype_from_name(o->head_dtype)) < 0)
        return g4_err_set(err, G4_EINVAL, "unknown head dtype \"%s\" (f32, bf16, f16, q8_0, q4_0)", o->head_dtype);
    if (o->tp < 1 || o->tp > 4096) return g4_err_set(err, G4_EINVAL, "--tp must be in 1..4096 (got %d)", o->tp);
    if (g4_artifact_is_dir(o->model_dir))
        return g4_err_set(err, G4_EINVAL, "%s is already an artifact folder; shard a Hugging Face checkpoint folder", o->model_dir);
    out = strdup(o->out_dir);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;
    struct stat sb;
    int exists = lstat(out, &sb) == 0;
    if (exists && !o->force) {
        rc = g4_err_set(err, G4_EINVAL, "%s already exists (use --force to replace it)", out);
        goto done;
    }
    if (exists && !(S_ISDIR(sb.st_mode) && g4_artifact_is_dir(out))) {
        rc = g4_err_set(err, G4_EINVAL, "%s exists and is not a g4tp artifact folder; refusing to replace it", out);
        goto done;
    }
    if ((rc = g4_checkpoint_open(o->model_dir, &c.ck, err))) goto done;
    const g4_config *cfg = &c.ck.cfg;
    const int T = o->tp, n = c.ck.n_specs;
    c.nv = c.ck.has_vision && !o->no_vision ? c.ck.n_vspecs : 0;
    c.plans = calloc((size_t)T, sizeof *c.plans);
    c.ents = calloc((size_t)T, sizeof *c.ents);
    c.fsize = calloc((size_t)T, sizeof *c.fsize);
    c.fds = malloc(sizeof(int) * (size_t)T);
    c.buf = malloc(CHUNK_BYTES);
    if (!c.plans || !c.ents || !c.fsize || !c.fds || !c.buf) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    for (int r = 0; r < T; r++) c.fds[r] = -1;
    /* the row-parallel matrices' dtype cuts the reduction slices (packed int4 -> q4_0 blocks) */
    int wd = -1;
    for (int i = 0; i < n; i++)
        if (c.ck.specs[i].kind == G4_T_DOWN) {
            int d = entry_dtype(&c.ck.specs[i], g4_checkpoint_dtype(&c.ck, i), c.req);
            if (wd < 0 || g4_tp_block_cols(d) > g4_tp_block_cols(wd)) wd = d;
        }
    if ((rc = g4_tp_check_dtype(cfg, wd, err))) goto done;
    if (o->q4_layout != G4_SHARD_Q4_BLOCKS && o->q4_layout != G4_SHARD_Q4_GROUPED) { rc = g4_err_set(err, G4_EINVAL, "unknown q4_0 layout %d", o->q4_layout); goto done; }
    const int grouped = o->q4_layout == G4_SHARD_Q4_GROUPED;
    if (!(c.err2 = calloc((size_t)n, sizeof *c.err2)) || !(c.ref2 = calloc((size_t)n, sizeof *c.ref2))) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    /* layout of every rank file, before any byte is written */
    for (int r = 0; r < T; r++) {
        if ((rc = g4_tp_plan_make(cfg, wd, T, r, &c.plans[r], err))) goto done;
        const int nr_ents = n + (r ? 0 : c.nv);
        if (!(c.ents[r] = calloc((size_t)nr_ents, sizeof **c.ents))) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
        uint64_t off = align_up((uint64_t)G4_ART_HEADER_BYTES + (uint64_t)nr_ents * G4_ART_ENTRY_BYTES);
        for (int i = 0; i < n; i++) {
            const g4_tensor_spec *s = &c.ck.specs[i];
            g4_art_entry *e = &c.ents[r][i];
            int64_t r0, nr, c0, nc;
            g4_tp_tensor_slice(cfg, &c.plans[r], s, &r0, &nr, &c0, &nc);
            snprintf(e->name, sizeof e->name, "%s", s->name);
            e->dtype = entry_dtype(s, g4_checkpoint_dtype(&c.ck, i), c.req);
            if (is_block(e->dtype) && nc % 32) {
                rc = g4_err_set(err, G4_EUNSUPPORTED, "%s: %s has %lld columns on rank %d, not a multiple of 32", g4_dtype_name(e->dtype), s->name, (long long)nc, r);
                goto done;
            }
            if (e->dtype == G4_DT_Q4_0 && grouped) {
                e->q4_group_cols = g4_q4_0_group_cols(cfg, &c.plans[r], s->kind, s->layer, nc);
                /* the avx512 set's decode reads wide row-parallel matrices in column parts */
                e->col_parts = g4_rowpar_col_parts(cfg, &c.plans[r], e->dtype, s->kind, s->layer, nc, o->rowpar_part_cols);
                if (e->col_parts > 1) c.col_parts = 1;
                /* partial groups in the tail layout (kernels.h), unless asked for the older one */
                if (e->q4_group_cols && (e->q4_group_cols / G4_Q4_BLOCK) % 16 && !o->q4_tail_blocks) c.q4_tail = 1;
            } else if (e->dtype == G4_DT_Q8_0) {
                /* every set reads q8_0 parts (slice views); the avx512 decode streams them faster */
                e->col_parts = g4_rowpar_col_parts(cfg, &c.plans[r], e->dtype, s->kind, s->layer, nc, o->rowpar_part_cols);
                if (e->col_parts > 1) c.q8_parts = 1;
            }
            e->rows = nr;
            e->cols = nc;
            e->nbytes = g4_dtype_row_bytes(e->dtype, nc) * (uint64_t)nr;
            e->offset = align_up(off);
            off = e->offset + e->nbytes;
            c.total += e->nbytes;
        }
        for (int j = 0; j < nr_ents - n; j++) { /* rank 0: the vision tower, whole and as stored */
            const g4_mat v = g4_checkpoint_vision_view(&c.ck, j);
            g4_art_entry *e = &c.ents[r][n + j];
            snprintf(e->name, sizeof e->name, "%s", c.ck.vspecs[j].name);
            e->dtype = v.dtype;
            e->rows = v.rows;
            e->cols = v.cols;
            e->nbytes = g4_dtype_row_bytes(e->dtype, v.cols) * (uint64_t)v.rows;
            e->offset = align_up(off);
            off = e->offset + e->nbytes;
            c.total += e->nbytes;
        }
        c.fsize[r] = off;
    }
    /* the temp folder beside OUT */
    size_t tl = strlen(out) + 32;
    c.tmp = malloc(tl);
    snprintf(c.tmp, tl, "%s.tmp-%ld", out, (long)getpid());
    remove_tree(c.tmp);
    if (mkdir(c.tmp, 0755) != 0) { rc = g4_err_set(err, G4_EIO, "cannot create %s: %s", c.tmp, strerror(errno)); free(c.tmp); c.tmp = NULL; goto done; }
    for (int r = 0; r < T; r++) {
        char name[64];
        g4_artifact_rank_name(r, T, name, sizeof name);
        char *p = g4_path_join(c.tmp, name);
        c.fds[r] = open(p, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
        int en = errno;
        if (c.fds[r] < 0 || ftruncate(c.fds[r], (off_t)c.fsize[r]) != 0) rc = g4_err_set(err, G4_EIO, "cannot create %s: %s", p, strerror(c.fds[r] < 0 ? en : errno));
        free(p);
        if (rc) goto done;
    }
    /* tensor by tensor, each rank's rectangle (write_slice lets go of the source pages) */
    for (int i = 0; i < n && rc == G4_OK; i++) {
        for (int r = 0; r < T && rc == G4_OK; r++) rc = write_slice(&c, r, i, err);
        const int sd = g4_checkpoint_dtype(&c.ck, i), dd = c.ents[0][i].dtype;
        if (rc == G4_OK && o->report && is_block(dd))
            o->report(o->progress_ud, c.ck.specs[i].name, sd, dd, sd == G4_DT_CT_INT4 ? 0.0 : c.ref2[i] > 0 ? c.err2[i] / c.ref2[i] : 0.0);
    }
    for (int j = 0; j < c.nv && rc == G4_OK; j++)
        rc = write_entry(&c, 0, &c.ents[0][n + j], g4_checkpoint_vision_view(&c.ck, j), c.ck.vspecs[j].name, -1, err);
    if (rc) goto done;
    /* side files and the config */
    json_error_t je;
    if (!(config = json_loads(cfg->json, 0, &je))) { rc = g4_err_set(err, G4_EFORMAT, "config.json: %s", je.text); goto done; }
    uint64_t cfg_hash = canonical_hash(config);
    files = json_array();
    for (size_t k = 0; k < sizeof side_files / sizeof *side_files; k++) {
        char *p = g4_path_join(o->model_dir, side_files[k]);
        int have = g4_file_exists(p);
        free(p);
        if (!have) continue;
        uint64_t size, h;
        if ((rc = copy_side(&c, side_files[k], &size, &h, err))) goto done;
        char hx[17];
        hex64(h, hx);
        json_t *f = json_object();
        json_object_set_new(f, "file", json_string(side_files[k]));
        json_object_set_new(f, "size", json_integer((json_int_t)size));
        json_object_set_new(f, "xxh3", json_string(hx));
        json_array_append_new(files, f);
    }
    man = build_manifest(&c, config, files);
    /* headers and tables, last: a rank file with a valid header has all its data */
    for (int r = 0; r < T; r++) {
        const int nr_ents = n + (r ? 0 : c.nv);
        size_t hb = G4_ART_HEADER_BYTES + (size_t)nr_ents * G4_ART_ENTRY_BYTES;
        uint8_t *h = calloc(1, hb);
        if (!h) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
        encode_header(h, T, r, nr_ents, c.fsize[r], cfg_hash, o->dtype, write_version(c.nv, c.col_parts, c.q4_tail, c.q8_parts));
        for (int i = 0; i < nr_ents; i++) encode_entry(h + G4_ART_HEADER_BYTES + (size_t)i * G4_ART_ENTRY_BYTES, &c.ents[r][i]);
        char hx[17];
        hex64(XXH3_64bits(h, hb), hx);
        json_object_set_new(json_array_get(json_object_get(man, "ranks"), (size_t)r), "header_xxh3", json_string(hx));
        int w = pwrite_all(c.fds[r], h, hb, 0);
        free(h);
        if (w || fsync(c.fds[r]) != 0 || close(c.fds[r]) != 0) { c.fds[r] = -1; rc = g4_err_set(err, G4_EIO, "writing rank file %d: %s", r, strerror(errno)); goto done; }
        c.fds[r] = -1;
    }
    {
        char hx[17];
        hex64(manifest_hash(man), hx);
        json_object_set_new(man, "manifest_xxh3", json_string(hx));
        char *text = json_dumps(man, JSON_INDENT(2) | JSON_SORT_KEYS);
        char *p = g4_path_join(c.tmp, "manifest.json");
        size_t len = strlen(text);
        FILE *f = fopen(p, "wb");
        int ok = f && fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok) rc = g4_err_set(err, G4_EIO, "writing %s: %s", p, strerror(errno));
        free(p);
        free(text);
        if (rc) goto done;
    }
    if (canceled(&c)) { rc = g4_err_set(err, G4_ECANCELED, "interrupted"); goto done; }
    fsync_path(c.tmp, 1);
    if ((rc = publish(c.tmp, out, exists, err))) goto done;
    free(c.tmp);
    c.tmp = NULL;
    parent_fsync(out);
done:
    if (c.fds)
        for (int r = 0; r < o->tp; r++)
            if (c.fds[r] >= 0) close(c.fds[r]);
    if (c.tmp) { remove_tree(c.tmp); free(c.tmp); }
    if (c.plans) for (int r = 0; r < o->tp; r++) g4_tp_plan_free(&c.plans[r]);
    if (c.ents) for (int r = 0; r < o->tp; r++) free(c.ents[r]);
    free(c.plans);
    free(c.ents);
    free(c.fsize);
    free(c.fds);
    free(c.buf);
    free(c.err2);
    free(c.ref2);
    json_decref(config);
    json_decref(files);
    json_decref(man);
    if (c.ck.dir) g4_checkpoint_close(&c.ck);
    free(out);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------------ */

/* An entry's bytes: size for its shape, 4096-aligned, after the previous one, inside the file;
 * with verify, its checksum. */
static int check_placement(const g4_art_rank *R, const g4_art_entry *e, int64_t nr, int64_t nc, uint64_t prev_end, int verify,
                           const char *name, g4_err *err) {
    const uint64_t size = R->map.size;
    if (e->nbytes != g4_dtype_row_bytes(e->dtype, nc) * (uint64_t)nr || e->offset % G4_ART_ALIGN || e->offset < prev_end || e->offset > size ||
        e->nbytes > size - e->offset)
        return g4_err_set(err, G4_EFORMAT, "%s: tensor %s: bad placement (offset %llu, %llu bytes, file %llu bytes)", R->map.path, name,
                          (unsigned long long)e->offset, (unsigned long long)e->nbytes, (unsigned long long)size);
    if (verify && XXH3_64bits(R->map.data + e->offset, e->nbytes) != e->xxh3)
        return g4_err_set(err, G4_ECHECKSUM, "%s: tensor %s: checksum mismatch (corrupt data)", R->map.path, name);
    return G4_OK;
}

/* Column parts: q4_0 (version 4) or q8_0 (version 6) o_proj / down_proj only, each part a whole
 * number of the forward pass's slices, so that its views of them (forward.c rp_slice) fall inside
 * one part. */
static int col_parts_ok(const g4_config *cfg, const g4_tp_plan *plan, const g4_tensor_spec *s, const g4_art_entry *e, uint32_t ver) {
    const int dt_ok = (e->dtype == G4_DT_Q4_0 && ver >= 4) || (e->dtype == G4_DT_Q8_0 && ver >= 6);
    if (!dt_ok || e->col_parts < 2 || (s->kind != G4_T_O && s->kind != G4_T_DOWN)) return 0;
    const int64_t slice = g4_q4_0_group_cols(cfg, plan, s->kind, s->layer, e->cols);
    return slice > 0 && (e->cols / slice) % e->col_parts == 0;
}

static int open_rank(g4_artifact *a, int r, json_t *jr, uint64_t cfg_hash, int verify, g4_err *err) {
    char name[64];
    g4_artifact_rank_name(r, a->tp, name, sizeof name);
    json_t *jf = json_object_get(jr, "file"), *js = json_object_get(jr, "size"), *jh = json_object_get(jr, "header_xxh3"),
           *jb = json_object_get(jr, "header_bytes");
    uint64_t want_hh;
    if (!json_is_string(jf) || strcmp(json_string_value(jf), name) || !json_is_integer(js) || !json_is_integer(jb) ||
        !parse_hex64(json_string_value(jh), &want_hh))
        return g4_err_set(err, G4_EFORMAT, "%s/manifest.json: ranks[%d] must name %s with its size, header_bytes and header_xxh3", a->dir, r, name);
    char *path = g4_path_join(a->dir, name);
    g4_art_rank *R = &a->ranks[r];
    int rc = g4_mapfile_open(&R->map, path, err);
    free(path);
    if (rc) return rc;
    const char *fp = R->map.path;
    const uint8_t *d = R->map.data;
    const uint64_t size = R->map.size;
    const int n = a->n_specs, nv = r ? 0 : a->n_vision; /* rank 0 also holds the vision tower */
    const uint64_t hb = (uint64_t)G4_ART_HEADER_BYTES + (uint64_t)(n + nv) * G4_ART_ENTRY_BYTES;
    if (size != (uint64_t)json_integer_value(js))
        return g4_err_set(err, G4_EFORMAT, "%s: %llu bytes, the manifest says %lld (truncated or replaced)", fp, (unsigned long long)size,
                          (long long)json_integer_value(js));
    if (size < G4_ART_HEADER_BYTES || memcmp(d, G4_ART_MAGIC, 8) != 0)
        return g4_err_set(err, G4_EFORMAT, "%s: not a g4tp rank file (bad magic)", fp);
    const uint32_t ver = get32(d + 8);
    if (ver < G4_ART_VERSION_MIN || ver > G4_ART_VERSION)
        return g4_err_set(err, G4_EUNSUPPORTED, "%s: format version %u (this build reads %d to %d)", fp, ver, G4_ART_VERSION_MIN, G4_ART_VERSION);
    R->version = (int)ver;
    if ((int)get32(d + 12) != a->tp || (int)get32(d + 16) != r)
        return g4_err_set(err, G4_EFORMAT, "%s: header says rank %u of TP %u, expected rank %d of TP %d", fp, get32(d + 16), get32(d + 12), r, a->tp);
    if ((int)get32(d + 20) != n + nv || get64(d + 24) != hb || (uint64_t)json_integer_value(jb) != hb || size < hb)
        return g4_err_set(err, G4_EFORMAT, "%s: header declares %u tensors (%llu header bytes); the model has %d", fp, get32(d + 20),
                          (unsigned long long)get64(d + 24), n + nv);
    if (get64(d + 32) != size) return g4_err_set(err, G4_EFORMAT, "%s: header says %llu bytes, the file has %llu (truncated)", fp, (unsigned long long)get64(d + 32), (unsigned long long)size);
    if (XXH3_64bits(d, hb) != want_hh) return g4_err_set(err, G4_ECHECKSUM, "%s: header checksum does not match manifest.json", fp);
    if (get64(d + 40) != cfg_hash) return g4_err_set(err, G4_ECHECKSUM, "%s: made for another config than the one in manifest.json", fp);
    if ((int)(int32_t)get32(d + 48) != a->dtype) return g4_err_set(err, G4_EFORMAT, "%s: header dtype differs from manifest.json", fp);
    g4_tp_plan plan;
    if ((rc = g4_tp_plan_make(&a->cfg, a->dtype, a->tp, r, &plan, err))) return rc;
    if (!(R->ents = calloc((size_t)(n + nv), sizeof *R->ents))) { g4_tp_plan_free(&plan); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    uint64_t prev_end = hb;
    for (int i = 0; i < n && rc == G4_OK; i++) {
        g4_art_entry *e = &R->ents[i];
        const g4_tensor_spec *s = &a->specs[i];
        decode_entry(d + G4_ART_HEADER_BYTES + (size_t)i * G4_ART_ENTRY_BYTES, e);
        int64_t r0, nr, c0, nc;
        g4_tp_tensor_slice(&a->cfg, &plan, s, &r0, &nr, &c0, &nc);
        int mat = g4_tensor_kind_is_matrix(s->kind);
        if (strcmp(e->name, s->name))
            rc = g4_err_set(err, G4_EFORMAT, "%s: table entry %d is \"%s\", expected tensor %s", fp, i, e->name, s->name);
        else if (e->dtype < 0 || e->dtype >= G4_DT_COUNT || (!mat && is_block(e->dtype)) || (is_block(e->dtype) && nc % 32))
            rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s has an invalid dtype %d", fp, s->name, e->dtype);
        else if (e->q4_group_cols && (ver < 2 || e->dtype != G4_DT_Q4_0 || e->q4_group_cols % 32 || nc % e->q4_group_cols))
            rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: invalid q4_0 grouping (%lld columns, dtype %s)", fp, s->name,
                            (long long)e->q4_group_cols, g4_dtype_name(e->dtype));
        else if (e->rows != nr || e->cols != nc)
            rc = g4_err_set(err, G4_ESHAPE, "%s: tensor %s is %lldx%lld, rank %d of TP %d holds %lldx%lld", fp, s->name, (long long)e->rows,
                            (long long)e->cols, r, a->tp, (long long)nr, (long long)nc);
        else if (e->col_parts && !col_parts_ok(&a->cfg, &plan, s, e, ver))
            rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: invalid column parts (%d of %lld columns, dtype %s)", fp, s->name, e->col_parts,
                            (long long)nc, g4_dtype_name(e->dtype));
        else rc = check_placement(R, e, nr, nc, prev_end, verify, s->name, err);
        prev_end = e->offset + e->nbytes;
    }
    g4_tp_plan_free(&plan);
    for (int j = 0; j < nv && rc == G4_OK; j++) { /* the vision tower: whole tensors, as stored */
        g4_art_entry *e = &R->ents[n + j];
        const g4_tensor_spec *s = &a->vspecs[j];
        decode_entry(d + G4_ART_HEADER_BYTES + (size_t)(n + j) * G4_ART_ENTRY_BYTES, e);
        int64_t nr, nc;
        g4_tensor_spec_rows_cols(s, &nr, &nc);
        if (strcmp(e->name, s->name))
            rc = g4_err_set(err, G4_EFORMAT, "%s: table entry %d is \"%s\", expected tensor %s", fp, n + j, e->name, s->name);
        else if ((e->dtype != G4_DT_F32 && e->dtype != G4_DT_BF16 && e->dtype != G4_DT_F16) || e->q4_group_cols || e->col_parts)
            rc = g4_err_set(err, G4_EFORMAT, "%s: vision tensor %s has an invalid dtype %d (f32, bf16, f16)", fp, s->name, e->dtype);
        else if (e->rows != nr || e->cols != nc)
            rc = g4_err_set(err, G4_ESHAPE, "%s: vision tensor %s is %lldx%lld, the vision_config needs %lldx%lld", fp, s->name, (long long)e->rows,
                            (long long)e->cols, (long long)nr, (long long)nc);
        else rc = check_placement(R, e, nr, nc, prev_end, verify, s->name, err);
        prev_end = e->offset + e->nbytes;
    }
    return rc;
}

static int check_side_files(g4_artifact *a, json_t *files, int verify, g4_err *err) {
    size_t k;
    json_t *f;
    if (!json_is_array(files)) return g4_err_set(err, G4_EFORMAT, "%s/manifest.json: \"files\" must be an array", a->dir);
    json_array_foreach(files, k, f) {
        const char *name = json_string_value(json_object_get(f, "file"));
        json_t *js = json_object_get(f, "size");
        uint64_t want;
        if (!name || strchr(name, '/') || !json_is_integer(js) || !parse_hex64(json_string_value(json_object_get(f, "xxh3")), &want))
            return g4_err_set(err, G4_EFORMAT, "%s/manifest.json: files[%zu] must have a plain file name, size and xxh3", a->dir, k);
        char *p = g4_path_join(a->dir, name);
        struct stat sb;
        int rc = G4_OK;
        if (stat(p, &sb) != 0) rc = g4_err_set(err, G4_EIO, "%s: listed in manifest.json but missing", p);
        else if ((uint64_t)sb.st_size != (uint64_t)json_integer_value(js))
            rc = g4_err_set(err, G4_EFORMAT, "%s: %lld bytes, the manifest says %lld", p, (long long)sb.st_size, (long long)json_integer_value(js));
        else if (verify) {
            g4_mapfile m;
            if ((rc = g4_mapfile_open(&m, p, err)) == G4_OK) {
                if (XXH3_64bits(m.data, m.size) != want) rc = g4_err_set(err, G4_ECHECKSUM, "%s: checksum mismatch", p);
                g4_mapfile_close(&m);
            }
        }
        free(p);
        if (rc) return rc;
    }
    return G4_OK;
}

int g4_artifact_open(const char *dir, int only_rank, int tp, int verify, g4_artifact **out, g4_err *err) {
    *out = NULL;
    g4_artifact *a = calloc(1, sizeof *a);
    if (!a) return g4_err_set(err, G4_ENOMEM, "out of memory");
    a->dir = strdup(dir);
    char *mp = g4_path_join(dir, "manifest.json"), *text = NULL, *cfg_text = NULL;
    json_t *m = NULL;
    size_t len;
    int rc = g4_read_file(mp, &text, &len, err);
    if (rc) goto done;
    json_error_t je;
    if (!(m = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je))) { rc = g4_err_set(err, G4_EFORMAT, "%s: malformed JSON at line %d: %s", mp, je.line, je.text); goto done; }
    const char *fmt = json_string_value(json_object_get(m, "format"));
    if (!fmt || strcmp(fmt, "g4tp-artifact")) { rc = g4_err_set(err, G4_EFORMAT, "%s: not a g4tp artifact manifest (\"format\")", mp); goto done; }
    const json_int_t fv = json_integer_value(json_object_get(m, "format_version"));
    if (fv < G4_ART_VERSION_MIN || fv > G4_ART_VERSION) {
        rc = g4_err_set(err, G4_EUNSUPPORTED, "%s: format_version %lld (this build reads %d to %d)", mp, (long long)fv, G4_ART_VERSION_MIN, G4_ART_VERSION);
        goto done;
    }
    uint64_t mh;
    if (!parse_hex64(json_string_value(json_object_get(m, "manifest_xxh3")), &mh) || mh != manifest_hash(m)) {
        rc = g4_err_set(err, G4_ECHECKSUM, "%s: manifest checksum mismatch (the manifest was edited or damaged)", mp);
        goto done;
    }
    json_t *jt = json_object_get(m, "tp");
    if (!json_is_integer(jt) || json_integer_value(jt) < 1 || json_integer_value(jt) > 4096) { rc = g4_err_set(err, G4_EFORMAT, "%s: \"tp\" must be a positive integer", mp); goto done; }
    a->tp = (int)json_integer_value(jt);
    if (tp > 0 && tp != a->tp) {
        rc = g4_err_set(err, G4_EINVAL, "%s holds artifacts for TP %d, but TP %d was asked (run with --tp %d, or shard again with --tp %d)", dir, a->tp, tp, a->tp, tp);
        goto done;
    }
    if (only_rank >= a->tp) { rc = g4_err_set(err, G4_EINVAL, "%s holds TP %d artifacts; there is no rank %d", dir, a->tp, only_rank); goto done; }
    const char *dt = json_string_value(json_object_get(m, "dtype"));
    if (!dt || (strcmp(dt, "as-stored") && g4_dtype_from_name(dt) < 0)) { rc = g4_err_set(err, G4_EFORMAT, "%s: unknown \"dtype\"", mp); goto done; }
    a->dtype = strcmp(dt, "as-stored") ? g4_dtype_from_name(dt) : -1;
    json_t *jc = json_object_get(m, "config");
    if (!json_is_object(jc)) { rc = g4_err_set(err, G4_EFORMAT, "%s: no \"config\" object", mp); goto done; }
    cfg_text = canonical(jc);
    if ((rc = g4_config_parse(cfg_text, strlen(cfg_text), &a->cfg, err))) { g4_err_prefix(err, "%s: config: ", mp); goto done; }
    if (!g4_tp_degree_ok(&a->cfg, a->dtype, a->tp)) { rc = g4_err_set(err, G4_EFORMAT, "%s: TP %d does not fit its config", mp, a->tp); goto done; }
    if ((rc = g4_tensor_specs(&a->cfg, &a->specs, &a->n_specs, err))) goto done;
    if (json_integer_value(json_object_get(m, "n_tensors")) != a->n_specs) { rc = g4_err_set(err, G4_EFORMAT, "%s: n_tensors differs from the config's tensor table", mp); goto done; }
    json_t *jv = json_object_get(m, "vision_tensors"); /* absent: a text-only folder (or one from before the tower) */
    if (jv) {
        if ((rc = g4_vision_tensor_specs(&a->cfg, &a->vspecs, &a->n_vision, err))) goto done;
        if (!json_is_integer(jv) || json_integer_value(jv) != a->n_vision || a->n_vision == 0 || fv < 3) {
            rc = g4_err_set(err, G4_EFORMAT, "%s: vision_tensors (format_version %lld) does not match the config's vision tower (%d tensors, format_version 3)", mp,
                            (long long)fv, a->n_vision);
            goto done;
        }
    }
    json_t *jr = json_object_get(m, "ranks");
    if (!json_is_array(jr) || json_array_size(jr) != (size_t)a->tp) { rc = g4_err_set(err, G4_EFORMAT, "%s: \"ranks\" must list %d files", mp, a->tp); goto done; }
    if (!(a->ranks = calloc((size_t)a->tp, sizeof *a->ranks))) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    uint64_t cfg_hash = XXH3_64bits(cfg_text, strlen(cfg_text));
    for (int r = 0; r < a->tp && rc == G4_OK; r++)
        if (only_rank < 0 || only_rank == r) rc = open_rank(a, r, json_array_get(jr, (size_t)r), cfg_hash, verify, err);
    if (rc == G4_OK) rc = check_side_files(a, json_object_get(m, "files"), verify, err);
done:
    free(mp);
    free(text);
    free(cfg_text);
    json_decref(m);
    if (rc) g4_artifact_close(a);
    else *out = a;
    return rc;
}

int g4_artifact_vision_view(const g4_artifact *a, int idx, g4_mat *view, g4_err *err) {
    if (idx < 0 || idx >= a->n_vision) return g4_err_set(err, G4_EINVAL, "vision tensor index %d out of range", idx);
    if (!a->ranks[0].map.data || !a->ranks[0].ents) return g4_err_set(err, G4_EINVAL, "rank 0 of %s (the vision tower) was not opened", a->dir);
    const g4_art_entry *e = &a->ranks[0].ents[a->n_specs + idx];
    *view = (g4_mat){.data = a->ranks[0].map.data + e->offset, .dtype = e->dtype, .rows = e->rows, .cols = e->cols,
                     .ld_bytes = (int64_t)g4_dtype_row_bytes(e->dtype, e->cols)};
    return G4_OK;
}

int g4_artifact_view(const g4_artifact *a, int rank, int idx, g4_mat *view, g4_err *err) {
    if (rank < 0 || rank >= a->tp || !a->ranks[rank].map.data || !a->ranks[rank].ents)
        return g4_err_set(err, G4_EINVAL, "rank %d of %s was not opened", rank, a->dir);
    if (idx < 0 || idx >= a->n_specs) return g4_err_set(err, G4_EINVAL, "tensor index %d out of range", idx);
    const g4_art_entry *e = &a->ranks[rank].ents[idx];
    const int parts = e->col_parts > 1 ? e->col_parts : 1;
    *view = (g4_mat){.data = a->ranks[rank].map.data + e->offset, .dtype = e->dtype, .rows = e->rows, .cols = e->cols,
                     .ld_bytes = (int64_t)g4_dtype_row_bytes(e->dtype, e->cols / parts),
                     .layout = e->q4_group_cols ? G4_Q4_GROUPED : 0, .layout_cols = e->q4_group_cols,
                     .q4_tail = e->q4_group_cols && a->ranks[rank].version >= 5, .col_parts = parts > 1 ? parts : 0};
    return G4_OK;
}

void g4_artifact_close(g4_artifact *a) {
    if (!a) return;
    if (a->ranks)
        for (int r = 0; r < a->tp; r++) {
            g4_mapfile_close(&a->ranks[r].map);
            free(a->ranks[r].ents);
        }
    free(a->ranks);
    free(a->specs);
    free(a->vspecs);
    if (a->cfg.layers || a->cfg.json) g4_config_free(&a->cfg);
    free(a->dir);
    free(a);
}
