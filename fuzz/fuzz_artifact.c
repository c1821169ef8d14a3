/* fuzz_artifact.c — a g4tp artifact folder (g4_artifact_open): manifest.json, the rank files'
 * headers and tensor tables, the side files. Input: a flags byte, then the folder as
 * "=== NAME\n" sections (fuzz_util.h). A rank file section holds the header and table only;
 * it is extended with zeros to the size its header declares (at most 64 MiB), so the tensor
 * data need not be in the input. Unless flag 2 is set, the checksums the reader checks first
 * (manifest_xxh3, each rank's header_xxh3, the side files' xxh3) are recomputed for the
 * mutated content, so the fuzzer gets past them to the checks behind them. Flag 1: verify
 * every tensor's hash; flags 4-8: open one rank only. Invariants on success: every table entry
 * (rank 0's vision tower entries too) lies inside its rank's map, 4 KiB aligned, and its view
 * has the entry's shape. */
#include <jansson.h>
#include <xxhash.h>

#include "fuzz_util.h"
#include "model/artifact.h"

#define MAX_RANK_BYTES ((size_t)64 << 20)

static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }

static size_t rank_pad(const char *name, const uint8_t *p, size_t n) {
    size_t l = strlen(name);
    if (l < 4 || strcmp(name + l - 4, ".g4w") || n < G4_ART_HEADER_BYTES) return 0;
    uint64_t want = get64(p + 32);
    return want <= MAX_RANK_BYTES ? (size_t)want : 0;
}

static char *read_dir_file(const char *name, size_t *n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    return fuzz_read(path, n);
}

static void set_hex(json_t *o, const char *key, uint64_t h) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    json_object_set_new(o, key, json_string(hex));
}

/* Recomputes the checksums of the written folder, as g4tp shard would have written them. */
static void fix_checksums(void) {
    size_t n;
    char *text = read_dir_file("manifest.json", &n);
    json_t *m = text ? json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(text);
    if (!json_is_object(m)) { json_decref(m); return; }
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(m, "ranks"), i, r) {
        const char *file = json_string_value(json_object_get(r, "file"));
        char *d = file && !strchr(file, '/') ? read_dir_file(file, &n) : NULL;
        if (d && n >= G4_ART_HEADER_BYTES) {
            uint64_t hb = (uint64_t)G4_ART_HEADER_BYTES + (uint64_t)get32((const uint8_t *)d + 20) * G4_ART_ENTRY_BYTES;
            if (json_is_object(r) && hb <= n) set_hex(r, "header_xxh3", XXH3_64bits(d, hb));
        }
        free(d);
    }
    json_array_foreach(json_object_get(m, "files"), i, r) {
        const char *file = json_string_value(json_object_get(r, "file"));
        char *d = file && !strchr(file, '/') ? read_dir_file(file, &n) : NULL;
        if (d && json_is_object(r)) set_hex(r, "xxh3", XXH3_64bits(d, n));
        free(d);
    }
    json_object_del(m, "manifest_xxh3");
    char *canon = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (canon) set_hex(m, "manifest_xxh3", XXH3_64bits(canon, strlen(canon)));
    free(canon);
    char *out = json_dumps(m, JSON_INDENT(1) | JSON_ENCODE_ANY);
    if (out) fuzz_write_file("manifest.json", out, strlen(out), 0);
    free(out);
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned flags = fuzz_byte(&in);
    fuzz_write_folder(in, rank_pad);
    if (!(flags & 2)) fix_checksums();
    int verify = flags & 1, only_rank = (int)((flags >> 2) & 3) - 1;
    g4_artifact *a = NULL;
    g4_err err = {0};
    int rc = g4_artifact_open(fuzz_dir(), only_rank, 0, verify, &a, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(a == NULL, "artifact returned with a failure");
        return 0;
    }
    FUZZ_CHECK(a->tp >= 1 && a->n_specs > 0, "tp %d, %d specs", a->tp, a->n_specs);
    for (int r = 0; r < a->tp; r++) {
        const g4_art_rank *R = &a->ranks[r];
        if (!R->map.data) {
            FUZZ_CHECK(only_rank >= 0 && r != only_rank, "rank %d not opened", r);
            continue;
        }
        for (int i = 0; i < a->n_specs; i++) {
            const g4_art_entry *e = &R->ents[i];
            FUZZ_CHECK(e->offset % G4_ART_ALIGN == 0 && e->offset <= R->map.size && e->nbytes <= R->map.size - e->offset, "rank %d entry %d", r, i);
            g4_mat v;
            FUZZ_CHECK(g4_artifact_view(a, r, i, &v, &err) == 0, "view: %s", err.msg);
            FUZZ_CHECK(v.rows == e->rows && v.cols == e->cols, "view shape");
        }
    }
    for (int i = 0; i < a->n_vision && a->ranks[0].map.data; i++) { /* rank 0's vision entries: whole tensors, inside its map */
        const g4_art_entry *e = &a->ranks[0].ents[a->n_specs + i];
        int64_t rows, cols;
        g4_tensor_spec_rows_cols(&a->vspecs[i], &rows, &cols);
        FUZZ_CHECK(e->offset % G4_ART_ALIGN == 0 && e->offset <= a->ranks[0].map.size && e->nbytes <= a->ranks[0].map.size - e->offset, "vision entry %d", i);
        g4_mat v;
        FUZZ_CHECK(g4_artifact_vision_view(a, i, &v, &err) == 0, "vision view: %s", err.msg);
        FUZZ_CHECK(v.rows == rows && v.cols == cols, "vision view shape");
    }
    g4_artifact_close(a);
    return 0;
}
