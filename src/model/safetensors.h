/* safetensors.h — one .safetensors file: header parsed and checked, data mapped read-only.
 *
 * Checks every structural promise of the format before anything is read through it: the header
 * length fits in the file, the header is a JSON object, every tensor has a known dtype, a shape
 * of non-negative dims whose byte size equals its data_offsets span, offsets inside the data
 * area, and no two tensors overlap. Knows nothing about Gemma. */
#ifndef G4_MODEL_SAFETENSORS_H
#define G4_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/mapfile.h"

#define G4_ST_MAX_DIMS 8

typedef enum { G4_ST_F32, G4_ST_BF16, G4_ST_F16, G4_ST_F64, G4_ST_I64, G4_ST_I32, G4_ST_I16,
               G4_ST_I8, G4_ST_U8, G4_ST_BOOL, G4_ST_F8_E4M3, G4_ST_F8_E5M2, G4_ST_U16, G4_ST_U32,
               G4_ST_U64, G4_ST_NDTYPES } g4_st_dtype;

typedef struct g4_st_tensor {
    char *name;
    int dtype;                  /* g4_st_dtype */
    int ndim;
    int64_t shape[G4_ST_MAX_DIMS];
    const uint8_t *data;        /* inside the map */
    uint64_t nbytes;
} g4_st_tensor;

typedef struct g4_st_file {
    g4_mapfile map;
    g4_st_tensor *tensors;      /* sorted by name */
    size_t n_tensors;
} g4_st_file;

int g4_st_open(g4_st_file *f, const char *path, g4_err *err);
/* Same checks on an in-memory image (used by tests and fuzzing); bytes must outlive f. */
int g4_st_parse(g4_st_file *f, const uint8_t *bytes, size_t size, const char *name, g4_err *err);
void g4_st_close(g4_st_file *f);
const g4_st_tensor *g4_st_find(const g4_st_file *f, const char *name);
const char *g4_st_dtype_name(int dt);
size_t g4_st_dtype_size(int dt);

#endif
