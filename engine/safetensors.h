/*
 * safetensors.h: read (by mmap) and write Hugging Face safetensors files, and open a checkpoint
 * directory: one model.safetensors, or the shards named by model.safetensors.index.json.
 *
 * File format: an 8-byte little-endian header length n, n bytes of JSON
 *   {"NAME": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"format": "pt"}}
 * then the data; offsets are relative to the first byte after the header.
 *
 * Everything read from a file is outside input: st_open checks that the header length lies
 * inside the file, that the JSON parses, and that every tensor has a known dtype, a shape of
 * non-negative integers, offsets inside the data with end - begin == numel * dtype size, and no
 * two tensors overlap. A bad file gives an error naming the file and the tensor, never a crash.
 * Which tensors a model needs, with which shapes, is checked by the caller (weights.c).
 */
#ifndef TANDEM_SAFETENSORS_H
#define TANDEM_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

typedef enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E4M3, ST_F8_E5M2, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_I64, ST_U64, ST_F64, ST_NUM_DTYPES
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int32_t ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into the data section */
} st_tensor;

typedef struct st_file {
    char *path;
    uint8_t *map;        /* the whole file, mapped read-only */
    size_t size;         /* bytes */
    const uint8_t *data; /* first byte after the header */
    uint64_t data_len;   /* bytes */
    st_tensor *tensors;  /* (num_tensors) in header order */
    int32_t num_tensors;
} st_file;

const char *st_dtype_name(st_dtype d);
int32_t st_dtype_size(st_dtype d); /* bytes per element */
int64_t st_numel(const st_tensor *t);

/* Maps and validates `path`. On error nothing stays open. */
int st_open(st_file *f, const char *path, terr *e);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name); /* NULL if absent */
static inline const void *st_tensor_data(const st_file *f, const st_tensor *t)
{
    return f->data + t->begin;
}

/* A checkpoint directory: model.safetensors, or model.safetensors.index.json and its shards. */
typedef struct st_checkpoint {
    char *dir;
    st_file *files; /* (num_files) */
    int32_t num_files;
    char **index_names;   /* (num_index) tensor names listed by the index, sorted; NULL if none */
    int32_t *index_files; /* (num_index) which file each lives in */
    int32_t num_index;
} st_checkpoint;

int st_checkpoint_open(st_checkpoint *c, const char *dir, terr *e);
void st_checkpoint_close(st_checkpoint *c);
/* Finds `name`; returns 0 and sets *f, *t, or -1 with an error naming the file(s) searched. */
int st_checkpoint_find(const st_checkpoint *c, const char *name, const st_file **f,
                       const st_tensor **t, terr *e);

/* ---- writing ---- */
typedef struct st_write_tensor {
    const char *name;
    st_dtype dtype;
    int32_t ndim;
    int64_t shape[ST_MAX_DIMS];
} st_write_tensor;

/* Returns the bytes of tensor i (numel * dtype size of them), valid until the next call, or
 * NULL on failure (with e set). */
typedef const void *(*st_tensor_bytes_fn)(void *ctx, int32_t i, terr *e);

/* Writes n tensors to `path` in the given order, asking `bytes` for each one's data in turn, so
 * a large checkpoint never has to be in memory at once. The header is padded with spaces to a
 * multiple of 8 bytes and carries {"format": "pt"} as metadata (transformers requires it). */
int st_write(const char *path, const st_write_tensor *ts, int32_t n, st_tensor_bytes_fn bytes,
             void *ctx, terr *e);

#endif
