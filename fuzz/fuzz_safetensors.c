/* fuzz_safetensors.c — the safetensors container (g4_st_parse): 8-byte header length, JSON
 * header, data. Invariants on success: every tensor lies inside the data area, its byte size
 * is its shape times its dtype size, spans of non-empty tensors do not overlap, and each name
 * is found again by g4_st_find. */
#include "fuzz_util.h"
#include "model/safetensors.h"

static int cmp_ptr(const void *a, const void *b) {
    const g4_st_tensor *x = *(const g4_st_tensor *const *)a, *y = *(const g4_st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_st_file f;
    memset(&f, 0, sizeof f);
    g4_err err = {0};
    int rc = g4_st_parse(&f, data, size, "fuzz.safetensors", &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(f.tensors == NULL && f.n_tensors == 0, "tensors left after a failure");
        return 0;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    const uint8_t *area = data + 8 + hlen, *end = data + size;
    const g4_st_tensor **by_pos = malloc((f.n_tensors + 1) * sizeof *by_pos);
    size_t n_nonempty = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const g4_st_tensor *t = &f.tensors[i];
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= G4_ST_MAX_DIMS, "ndim %d", t->ndim);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
        FUZZ_CHECK(t->nbytes == count * g4_st_dtype_size(t->dtype), "tensor %s: %llu bytes", t->name, (unsigned long long)t->nbytes);
        FUZZ_CHECK(t->data >= area && t->data <= end && t->nbytes <= (uint64_t)(end - t->data), "tensor %s outside the data", t->name);
        FUZZ_CHECK(g4_st_find(&f, t->name) == t, "tensor %s not found by name", t->name);
        if (i) FUZZ_CHECK(strcmp(f.tensors[i - 1].name, t->name) < 0, "tensors not sorted / names repeated");
        if (t->nbytes) by_pos[n_nonempty++] = t;
    }
    qsort(by_pos, n_nonempty, sizeof *by_pos, cmp_ptr);
    for (size_t i = 1; i < n_nonempty; i++)
        FUZZ_CHECK(by_pos[i - 1]->data + by_pos[i - 1]->nbytes <= by_pos[i]->data, "tensors %s and %s overlap", by_pos[i - 1]->name,
                   by_pos[i]->name);
    free(by_pos);
    g4_st_close(&f); /* the map is empty: frees only the table */
    return 0;
}
