/* fuzz_checkpoint.c — a Hugging Face checkpoint folder (g4_checkpoint_open): config.json,
 * model.safetensors.index.json and the safetensors shards it names, packed into one input as
 * "=== NAME\n" sections (fuzz_util.h). Covers the index parser, shard lookup and the binding
 * of every tensor of the table. Invariants on success: every spec is bound to a tensor of its
 * shape with a kernel dtype, inside one of the mapped files; with a vision tower, each of its
 * tensors has its table entry's size and a whole-tensor view. */
#include "fuzz_util.h"
#include "model/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_folder((fuzz_in){data, size}, NULL);
    g4_checkpoint ck;
    g4_err err = {0};
    int rc = g4_checkpoint_open(fuzz_dir(), &ck, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        return 0;
    }
    FUZZ_CHECK(ck.n_specs > 0 && ck.n_files > 0, "%d specs, %d files", ck.n_specs, ck.n_files);
    for (int i = 0; i < ck.n_specs; i++) {
        const g4_st_tensor *t = ck.bound[i];
        const g4_tensor_spec *sp = &ck.specs[i];
        FUZZ_CHECK(t && t->ndim == sp->ndim && t->shape[0] == sp->shape[0] && (sp->ndim == 1 || t->shape[1] == sp->shape[1]), "spec %s", sp->name);
        int dt = g4_checkpoint_dtype(&ck, i);
        FUZZ_CHECK(dt >= 0, "spec %s: dtype %d", sp->name, dt);
        int inside = 0;
        for (int f = 0; f < ck.n_files && !inside; f++) {
            const g4_mapfile *m = &ck.files[f].map;
            inside = m->data && t->data >= m->data && t->data + t->nbytes <= m->data + m->size;
        }
        FUZZ_CHECK(inside || t->nbytes == 0, "spec %s: data outside every file", sp->name);
    }
    for (int i = 0; ck.has_vision && i < ck.n_vspecs; i++) { /* the vision tower: whole tensors of the table's sizes */
        const g4_st_tensor *t = ck.vbound[i];
        FUZZ_CHECK(t && t->nbytes == g4_st_dtype_size(t->dtype) * (uint64_t)g4_tensor_spec_numel(&ck.vspecs[i]), "vision spec %s", ck.vspecs[i].name);
        const g4_mat v = g4_checkpoint_vision_view(&ck, i);
        FUZZ_CHECK(v.dtype >= 0 && (uint64_t)(v.rows * v.ld_bytes) == t->nbytes, "vision view %s", ck.vspecs[i].name);
    }
    g4_checkpoint_close(&ck);
    return 0;
}
