/* safetensors.c: see safetensors.h. */
#include "engine/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    int32_t size;
} dtypes[ST_NUM_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},         [ST_I64] = {"I64", 8}, [ST_U64] = {"U64", 8},
    [ST_F64] = {"F64", 8},
};

const char *st_dtype_name(st_dtype d) { return d < ST_NUM_DTYPES ? dtypes[d].name : "?"; }
int32_t st_dtype_size(st_dtype d) { return d < ST_NUM_DTYPES ? dtypes[d].size : 0; }

int64_t st_numel(const st_tensor *t)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The safetensors reference implementation refuses headers over 100 MB; so do we, which also
 * bounds what a corrupt length can make us allocate. */
#define ST_MAX_HEADER (100u << 20)

static void free_tensors(st_file *f)
{
    for (int32_t i = 0; i < f->num_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    f->tensors = NULL;
    f->num_tensors = 0;
}

void st_close(st_file *f)
{
    if (f->map) munmap(f->map, f->size);
    free_tensors(f);
    free(f->path);
    *f = (st_file){0};
}

static int parse_tensor(st_file *f, const char *name, json_t *v, st_tensor *t, terr *e)
{
    const char *path = f->path;
    if (!json_is_object(v)) return terr_set(e, "%s: tensor \"%s\": entry is not an object", path, name);
    const char *dt = json_string_value(json_object_get(v, "dtype"));
    if (!dt) return terr_set(e, "%s: tensor \"%s\": missing \"dtype\"", path, name);
    t->dtype = ST_NUM_DTYPES;
    for (int d = 0; d < ST_NUM_DTYPES; d++)
        if (strcmp(dt, dtypes[d].name) == 0) t->dtype = (st_dtype)d;
    if (t->dtype == ST_NUM_DTYPES)
        return terr_set(e, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name, dt);
    json_t *shape = json_object_get(v, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS)
        return terr_set(e, "%s: tensor \"%s\": \"shape\" must be an array of at most %d integers",
                        path, name, ST_MAX_DIMS);
    t->ndim = (int32_t)json_array_size(shape);
    /* numel * size must not overflow: each dimension below 2^40 and the product checked. */
    unsigned __int128 bytes = (unsigned __int128)st_dtype_size(t->dtype);
    for (int32_t i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (1LL << 40))
            return terr_set(e, "%s: tensor \"%s\": shape[%d] is not a non-negative integer", path,
                            name, i);
        t->shape[i] = json_integer_value(d);
        bytes *= (uint64_t)t->shape[i];
        if (bytes > ((unsigned __int128)1 << 62))
            return terr_set(e, "%s: tensor \"%s\": shape is impossibly large", path, name);
    }
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
        return terr_set(e, "%s: tensor \"%s\": \"data_offsets\" must be [begin, end]", path, name);
    json_int_t b = json_integer_value(json_array_get(off, 0));
    json_int_t en = json_integer_value(json_array_get(off, 1));
    if (b < 0 || en < b)
        return terr_set(e, "%s: tensor \"%s\": bad data_offsets [%lld, %lld]", path, name,
                        (long long)b, (long long)en);
    if ((uint64_t)en > f->data_len)
        return terr_set(e,
                        "%s: tensor \"%s\": data_offsets [%lld, %lld] run past the end of the "
                        "data (%llu bytes): truncated file?",
                        path, name, (long long)b, (long long)en, (unsigned long long)f->data_len);
    if ((unsigned __int128)(uint64_t)(en - b) != bytes)
        return terr_set(e,
                        "%s: tensor \"%s\": data_offsets span %lld bytes but shape and dtype %s "
                        "need %llu",
                        path, name, (long long)(en - b), dt, (unsigned long long)bytes);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int st_open(st_file *f, const char *path, terr *e)
{
    *f = (st_file){0};
    f->path = xstrdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        terr_set(e, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        terr_set(e, "%s: not a regular file", path);
        goto fail;
    }
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        close(fd);
        terr_set(e, "%s: %zu bytes is too short for a safetensors file (truncated?)", path, f->size);
        goto fail;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        terr_set(e, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > f->size - 8) {
        terr_set(e, "%s: header length %llu is impossible for a file of %zu bytes", path,
                 (unsigned long long)hlen, f->size);
        goto fail;
    }
    f->data = f->map + 8 + hlen;
    f->data_len = f->size - 8 - hlen;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        terr_set(e, "%s: header is not valid JSON: %s (at byte %d)", path, jerr.text, jerr.position);
        goto fail;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        terr_set(e, "%s: header is not a JSON object", path);
        goto fail;
    }
    f->tensors = xcalloc(json_object_size(root), sizeof *f->tensors);
    const char *name;
    json_t *v;
    json_object_foreach(root, name, v)
    {
        if (strcmp(name, "__metadata__") == 0) continue;
        st_tensor *t = &f->tensors[f->num_tensors];
        if (parse_tensor(f, name, v, t, e)) {
            json_decref(root);
            goto fail;
        }
        t->name = xstrdup(name);
        f->num_tensors++;
    }
    json_decref(root);

    /* No two tensors may share bytes. */
    st_tensor **by_begin = xmalloc(sizeof *by_begin * (size_t)(f->num_tensors + 1));
    int32_t n = 0;
    for (int32_t i = 0; i < f->num_tensors; i++)
        if (f->tensors[i].end > f->tensors[i].begin) by_begin[n++] = &f->tensors[i];
    qsort(by_begin, (size_t)n, sizeof *by_begin, cmp_begin);
    for (int32_t i = 1; i < n; i++) {
        if (by_begin[i]->begin < by_begin[i - 1]->end) {
            terr_set(e, "%s: tensors \"%s\" and \"%s\" overlap (bytes [%llu, %llu) and [%llu, %llu))",
                     path, by_begin[i - 1]->name, by_begin[i]->name,
                     (unsigned long long)by_begin[i - 1]->begin,
                     (unsigned long long)by_begin[i - 1]->end,
                     (unsigned long long)by_begin[i]->begin, (unsigned long long)by_begin[i]->end);
            free(by_begin);
            goto fail;
        }
    }
    free(by_begin);
    return 0;
fail:
    st_close(f);
    return -1;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int32_t i = 0; i < f->num_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

void st_checkpoint_close(st_checkpoint *c)
{
    for (int32_t i = 0; i < c->num_files; i++) st_close(&c->files[i]);
    for (int32_t i = 0; i < c->num_index; i++) free(c->index_names[i]);
    free(c->index_names);
    free(c->index_files);
    free(c->files);
    free(c->dir);
    *c = (st_checkpoint){0};
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int open_index(st_checkpoint *c, const char *index_path, terr *e)
{
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return terr_set(e, "%s:%d: invalid JSON: %s", index_path, jerr.line, jerr.text);
    int rc = -1;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        terr_set(e, "%s: missing \"weight_map\" object", index_path);
        goto out;
    }
    size_t n = json_object_size(map);
    c->index_names = xcalloc(n, sizeof *c->index_names);
    c->index_files = xcalloc(n, sizeof *c->index_files);
    char **shard_names = xcalloc(n, sizeof *shard_names);
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v)
    {
        const char *shard = json_string_value(v);
        if (!shard || !*shard || strchr(shard, '/')) {
            terr_set(e, "%s: weight_map[\"%s\"] must be a file name in the same directory",
                     index_path, name);
            c->num_files = 0; /* counted shard names, but no files opened (c->files is NULL) */
            goto out_shards;
        }
        int32_t k = 0;
        while (k < c->num_files && strcmp(shard_names[k], shard)) k++;
        if (k == c->num_files) shard_names[c->num_files++] = xstrdup(shard);
        c->index_names[c->num_index] = xstrdup(name);
        c->index_files[c->num_index++] = k;
    }
    c->files = xcalloc((size_t)c->num_files + 1, sizeof *c->files);
    for (int32_t k = 0; k < c->num_files; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", c->dir, shard_names[k]);
        if (st_open(&c->files[k], path, e)) {
            for (int32_t j = 0; j < k; j++) st_close(&c->files[j]);
            c->num_files = 0;
            goto out_shards;
        }
    }
    /* Sort the names (carrying their file) for binary search. */
    int32_t *order = xmalloc(sizeof *order * (size_t)c->num_index + 1);
    char **sorted = xmalloc(sizeof *sorted * (size_t)c->num_index + 1);
    memcpy(sorted, c->index_names, sizeof *sorted * (size_t)c->num_index);
    qsort(sorted, (size_t)c->num_index, sizeof *sorted, cmp_str);
    for (int32_t i = 0; i < c->num_index; i++)
        for (int32_t j = 0; j < c->num_index; j++)
            if (c->index_names[j] == sorted[i]) order[i] = c->index_files[j];
    memcpy(c->index_names, sorted, sizeof *sorted * (size_t)c->num_index);
    memcpy(c->index_files, order, sizeof *order * (size_t)c->num_index);
    free(order);
    free(sorted);
    rc = 0;
out_shards:
    for (size_t k = 0; k < n; k++) free(shard_names[k]);
    free(shard_names);
out:
    json_decref(root);
    return rc;
}

int st_checkpoint_open(st_checkpoint *c, const char *dir, terr *e)
{
    *c = (st_checkpoint){0};
    c->dir = xstrdup(dir);
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &st) == 0) {
        if (open_index(c, path, e)) goto fail;
        return 0;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &st) != 0) {
        terr_set(e, "%s: no model.safetensors or model.safetensors.index.json in this directory",
                 dir);
        goto fail;
    }
    c->files = xcalloc(1, sizeof *c->files);
    if (st_open(&c->files[0], path, e)) goto fail;
    c->num_files = 1;
    return 0;
fail:
    st_checkpoint_close(c);
    return -1;
}

int st_checkpoint_find(const st_checkpoint *c, const char *name, const st_file **f,
                       const st_tensor **t, terr *e)
{
    if (!c->index_names) {
        *f = &c->files[0];
        *t = st_find(*f, name);
        if (!*t) return terr_set(e, "%s: missing tensor \"%s\"", (*f)->path, name);
        return 0;
    }
    const char *key = name;
    char **hit = bsearch(&key, c->index_names, (size_t)c->num_index, sizeof *c->index_names, cmp_str);
    if (!hit)
        return terr_set(e, "%s/model.safetensors.index.json: missing tensor \"%s\"", c->dir, name);
    *f = &c->files[c->index_files[hit - c->index_names]];
    *t = st_find(*f, name);
    if (!*t)
        return terr_set(e, "%s: missing tensor \"%s\" (the index says it is in this shard)",
                        (*f)->path, name);
    return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */

int st_write(const char *path, const st_write_tensor *ts, int32_t n, st_tensor_bytes_fn bytes,
             void *ctx, terr *e)
{
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const st_write_tensor *t = &ts[i];
        json_t *shape = json_array();
        uint64_t numel = 1;
        for (int32_t d = 0; d < t->ndim; d++) {
            json_array_append_new(shape, json_integer(t->shape[d]));
            numel *= (uint64_t)t->shape[d];
        }
        uint64_t end = off + numel * (uint64_t)st_dtype_size(t->dtype);
        json_object_set_new(root, t->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", st_dtype_name(t->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)end));
        off = end;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;

    FILE *f = fopen(path, "wb");
    if (!f) {
        free(header);
        return terr_set(e, "%s: cannot create: %s", path, strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(header);
    for (int32_t i = 0; ok && i < n; i++) {
        uint64_t numel = 1;
        for (int32_t d = 0; d < ts[i].ndim; d++) numel *= (uint64_t)ts[i].shape[d];
        size_t nb = (size_t)numel * (size_t)st_dtype_size(ts[i].dtype);
        const void *data = bytes(ctx, i, e);
        if (!data) {
            fclose(f);
            return -1;
        }
        ok = fwrite(data, 1, nb, f) == nb;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) return terr_set(e, "%s: write failed: %s", path, strerror(errno));
    return 0;
}
