/* safetensors.c: safetensors reader and writer (format: https://github.com/huggingface/safetensors, README
 * "Format"; limits as the reference Rust implementation: header at most 100,000,000 bytes).
 *
 * The file is untrusted input: every length, offset and dimension is checked before it is used, every
 * allocation failure becomes TP_ERR_OOM, and every message is one line (names from the file are escaped and
 * shortened, because a tensor name may hold a newline or be megabytes long). */
#include "io/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/check.h"
#include "core/files.h"
#include "core/util.h"
#include "formats/dtype.h"

/* The data section is used in place as little-endian values (F32 goes through memcpy), and tp_st_write
 * copies caller data that is documented as little-endian. A big-endian host would need byte swaps. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors.c assumes a little-endian host");
#endif

/* Same limit as the reference implementation (MAX_HEADER_SIZE): a bigger header is a broken or hostile
 * file, not a model. */
#define ST_MAX_HEADER ((uint64_t)100000000)
/* Longest piece of a file-supplied name quoted in a message; keeps the 512-byte message readable. */
#define ST_NAME_MAX_QUOTE 120

/* ---- messages ----------------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if it is not valid (overlong forms,
 * surrogates and code points past U+10FFFF are invalid, as RFC 3629 says). */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static int utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (l == 0) return 0;
        i += l;
    }
    return 1;
}

/* Makes msg one printable line in place: control characters (newlines from a path or from jansson's
 * "near '...'" excerpt) and bytes that are not valid UTF-8 become '?'. The last resort after quote(). */
static void one_line(char *msg) {
    unsigned char *p = (unsigned char *)msg;
    size_t n = strlen(msg);
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (l == 0) {
            p[i++] = '?';
        } else if (l == 1 && (p[i] < 0x20 || p[i] == 0x7F)) {
            p[i++] = '?';
        } else {
            i += l;
        }
    }
}

/* Writes a quotable form of a file-supplied name into buf: control characters as \xNN, cut after
 * ST_NAME_MAX_QUOTE bytes (on a character boundary) with "...". Returns buf. */
static const char *quote(char *buf, size_t cap, const char *s) {
    size_t o = 0, n = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    CHECK(cap >= ST_NAME_MAX_QUOTE * 4 + 8);
    for (size_t i = 0; i < n;) {
        if (i >= ST_NAME_MAX_QUOTE) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        size_t l = utf8_seq_len(p + i, n - i);
        if (l == 1 && (p[i] < 0x20 || p[i] == 0x7F)) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", p[i]);
            i++;
        } else if (l == 0) {
            buf[o++] = '?';
            i++;
        } else {
            memcpy(buf + o, p + i, l);
            o += l;
            i += l;
        }
    }
    buf[o] = '\0';
    return buf;
}
#define QBUF (ST_NAME_MAX_QUOTE * 4 + 8)

/* File errors: "path: ..." on one line; beyond tp_fail_path, invalid UTF-8 from the file becomes '?'. */
#define st_fail(err, code, path, ...) (tp_fail_path((err), (code), (path), __VA_ARGS__), one_line_err(err), (code))
static void one_line_err(tp_error *err) {
    if (err) one_line(err->msg);
}

/* "[2304, 768]" into buf (always terminated, cut if tiny). */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    int w = snprintf(buf, cap, "[");
    o = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < ndim && o < cap; i++) {
        w = snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}
#define SBUF (TP_ST_MAX_DIMS * 22 + 4)

/* numel of a shape whose dims are already known to be >= 0; returns -1 if the element count or the byte
 * count (numel * elem_bytes) does not fit in uint64. */
static int shape_numel(int ndim, const int64_t *shape, size_t elem_bytes, uint64_t *numel, uint64_t *bytes) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > UINT64_MAX / d) return -1;
        n *= d;
    }
    if (elem_bytes != 0 && n > UINT64_MAX / elem_bytes) return -1;
    *numel = n;
    *bytes = n * elem_bytes;
    return 0;
}

/* ---- reading ------------------------------------------------------------------------------------------ */

void tp_st_close(tp_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    free(st->data);
    free(st->path);
    memset(st, 0, sizeof *st);
}

const tp_st_tensor *tp_st_find(const tp_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

/* Reads a JSON value that must be a non-negative integer (jansson keeps 1.0 and 1e3 as reals, so those are
 * rejected too, as the reference's u64/usize fields do). */
static int json_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -2;
    *out = (uint64_t)x;
    return 0;
}

/* Validates one header entry into *t (t->name is set by the caller). */
static tp_status parse_entry(const char *path, const char *name, const json_t *v, uint64_t data_size,
                             tp_st_tensor *t, tp_error *err) {
    char qn[QBUF], qs[QBUF], sb[SBUF];
    quote(qn, sizeof qn, name);
    if (!json_is_object(v))
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': entry is %s, expected an object with dtype, shape "
                       "and data_offsets", qn, tp_json_kind(v));
    const char *field;
    json_t *fv;
    json_object_foreach((json_t *)v, field, fv) {
        if (strcmp(field, "dtype") != 0 && strcmp(field, "shape") != 0 && strcmp(field, "data_offsets") != 0)
            return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': unexpected field '%s'", qn,
                           quote(qs, sizeof qs, field));
    }
    static const char *const required[3] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < 3; i++)
        if (!json_object_get(v, required[i]))
            return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': missing field '%s'", qn, required[i]);

    const json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': field 'dtype' is %s, expected a string", qn,
                       tp_json_kind(jd));
    if (tp_dtype_from_st(json_string_value(jd), &t->dtype) != 0)
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': unknown dtype '%s'", qn,
                       quote(qs, sizeof qs, json_string_value(jd)));

    const json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': field 'shape' is %s, expected an array of integers",
                       qn, tp_json_kind(js));
    size_t nd = json_array_size(js);
    if (nd > TP_ST_MAX_DIMS)
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': shape has %zu dimensions, at most %d are supported",
                       qn, nd, TP_ST_MAX_DIMS);
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        const json_t *e = json_array_get(js, i);
        uint64_t d;
        int rc = json_uint(e, &d);
        if (rc == -1)
            return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': shape[%zu] is %s, expected an integer", qn, i,
                           tp_json_kind(e));
        if (rc == -2)
            return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': shape[%zu] is negative (%lld)", qn, i,
                           (long long)json_integer_value(e));
        t->shape[i] = (int64_t)d; /* json_int_t is signed 64-bit, so d <= INT64_MAX */
    }

    const json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': field 'data_offsets' must be an array [begin, end]",
                       qn);
    uint64_t off[2];
    for (size_t i = 0; i < 2; i++) {
        const json_t *e = json_array_get(jo, i);
        int rc = json_uint(e, &off[i]);
        if (rc == -1)
            return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': data_offsets[%zu] is %s, expected an integer",
                           qn, i, tp_json_kind(e));
        if (rc == -2)
            return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': data_offsets[%zu] is negative (%lld)", qn, i,
                           (long long)json_integer_value(e));
    }
    t->begin = off[0];
    t->end = off[1];
    if (t->begin > t->end)
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': data_offsets [%llu, %llu] end before they begin", qn,
                       (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        return st_fail(err, TP_ERR_FORMAT, path,
                       "tensor '%s': data_offsets [%llu, %llu] run past the end of the data section (%llu bytes; "
                       "file truncated?)",
                       qn, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_size);
    const tp_dtype_traits *tr = tp_dtype_info(t->dtype);
    uint64_t numel, bytes;
    if (shape_numel(t->ndim, t->shape, tr->bytes, &numel, &bytes) != 0)
        return st_fail(err, TP_ERR_FORMAT, path, "tensor '%s': shape %s has too many elements", qn,
                       shape_str(sb, sizeof sb, t->ndim, t->shape));
    if (t->end - t->begin != bytes)
        return st_fail(err, TP_ERR_FORMAT, path,
                       "tensor '%s': data_offsets [%llu, %llu] span %llu bytes, but shape %s of %s needs %llu", qn,
                       (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin), shape_str(sb, sizeof sb, t->ndim, t->shape),
                       tr->st_name, (unsigned long long)bytes);
    return TP_OK;
}

typedef struct {
    uint64_t begin, end;
    int i;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* No two tensors share a byte of the data section (one tensor's bytes would be read as another's); empty tensors
 * take no bytes. The reference implementation (safetensors' validate) refuses it too. */
static tp_status check_overlaps(const char *path, const tp_safetensors *st, tp_error *err) {
    st_range *r = malloc(sizeof *r * (size_t)(st->n_tensors ? st->n_tensors : 1));
    if (!r) return st_fail(err, TP_ERR_OOM, path, "out of memory checking %d tensors' data_offsets", st->n_tensors);
    int m = 0;
    for (int i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].end > st->tensors[i].begin) r[m++] = (st_range){st->tensors[i].begin, st->tensors[i].end, i};
    qsort(r, (size_t)m, sizeof *r, cmp_range);
    tp_status s = TP_OK;
    int last = -1; /* the range reaching furthest so far */
    for (int k = 0; k < m && !s; k++) {
        if (last >= 0 && r[k].begin < r[last].end) {
            const tp_st_tensor *a = &st->tensors[r[last].i], *b = &st->tensors[r[k].i];
            s = st_fail(err, TP_ERR_FORMAT, path, "tensors '%.120s' (data_offsets [%llu, %llu]) and '%.120s' ([%llu, "
                        "%llu]) overlap: one tensor's bytes would be read as another's", a->name,
                        (unsigned long long)a->begin, (unsigned long long)a->end, b->name,
                        (unsigned long long)b->begin, (unsigned long long)b->end);
        }
        if (last < 0 || r[k].end > r[last].end) last = k;
    }
    free(r);
    return s;
}

/* Parses the header JSON (hdr, n bytes) into st->tensors; the data section size is already known. Duplicate keys
 * are refused (JSON leaves them to the reader: the last would silently win). */
static tp_status parse_header(const char *path, const char *hdr, size_t n, tp_safetensors *st, tp_error *err) {
    json_error_t je;
    json_t *root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_out_of_memory)
            return st_fail(err, TP_ERR_OOM, path, "out of memory parsing the %zu-byte header", n);
        return st_fail(err, TP_ERR_FORMAT, path, "header JSON: %s (line %d, column %d, byte %d)", je.text, je.line,
                       je.column, je.position);
    }
    tp_status s = TP_OK;
    if (!json_is_object(root)) {
        s = st_fail(err, TP_ERR_FORMAT, path, "header JSON is %s, expected an object of tensors", tp_json_kind(root));
        goto done;
    }
    const json_t *meta = json_object_get(root, "__metadata__");
    if (meta && !json_is_object(meta)) {
        s = st_fail(err, TP_ERR_FORMAT, path, "'__metadata__' is %s, expected an object of strings", tp_json_kind(meta));
        goto done;
    }
    /* The array grows as entries validate rather than being sized from the key count up front: a hostile
     * header of a million bogus keys then fails at the first one instead of allocating for all of them.
     * Every valid entry takes over 40 header bytes and the header is at most 1e8 bytes, so int suffices. */
    int cap = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        if (st->n_tensors == cap) {
            int ncap = cap ? cap * 2 : 16;
            tp_st_tensor *nt = realloc(st->tensors, (size_t)ncap * sizeof *nt);
            if (!nt) {
                s = st_fail(err, TP_ERR_OOM, path, "out of memory for %d tensor entries", ncap);
                goto done;
            }
            st->tensors = nt;
            cap = ncap;
        }
        tp_st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof *t);
        s = parse_entry(path, key, v, st->data_size, t, err);
        if (s != TP_OK) goto done;
        size_t kl = strlen(key);
        t->name = malloc(kl + 1);
        if (!t->name) {
            s = st_fail(err, TP_ERR_OOM, path, "out of memory for tensor names");
            goto done;
        }
        memcpy(t->name, key, kl + 1);
        st->n_tensors++;
    }
    s = check_overlaps(path, st, err);
done:
    json_decref(root);
    return s;
}

tp_status tp_st_open(const char *path, tp_safetensors *st, tp_error *err) {
    CHECK(st != NULL);
    memset(st, 0, sizeof *st);
    if (!path) return tp_fail(err, TP_ERR_ARG, "safetensors: no path given");
    tp_status s = TP_OK;
    char *hdr = NULL;
    FILE *f = tp_input_open(path, "the safetensors file", err);
    if (!f) return err ? err->code : TP_ERR_IO;

    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        s = st_fail(err, TP_ERR_IO, path, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    /* The header length is checked against the file size, so the size must be real (not a pipe). */
    if (!S_ISREG(sb.st_mode)) {
        s = st_fail(err, TP_ERR_IO, path, "not a regular file");
        goto fail;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8) {
        s = st_fail(err, TP_ERR_FORMAT, path, "file is %llu bytes, too short for the 8-byte header length",
                    (unsigned long long)fsize);
        goto fail;
    }
    unsigned char lb[8];
    if (fread(lb, 1, 8, f) != 8) {
        s = st_fail(err, TP_ERR_IO, path, "cannot read the header length: %s", ferror(f) ? strerror(errno) : "early end of file");
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | lb[i];
    if (n > fsize - 8) {
        s = st_fail(err, TP_ERR_FORMAT, path, "header length %llu is past the end of the file (%llu bytes)",
                    (unsigned long long)n, (unsigned long long)fsize);
        goto fail;
    }
    if (n > ST_MAX_HEADER) {
        s = st_fail(err, TP_ERR_FORMAT, path, "header length %llu exceeds the limit of %llu bytes",
                    (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
        goto fail;
    }
    if (n < 2) {
        s = st_fail(err, TP_ERR_FORMAT, path, "header length %llu is too short for a JSON object",
                    (unsigned long long)n);
        goto fail;
    }
    hdr = malloc((size_t)n);
    if (!hdr) {
        s = st_fail(err, TP_ERR_OOM, path, "out of memory for the %llu-byte header", (unsigned long long)n);
        goto fail;
    }
    if (fread(hdr, 1, (size_t)n, f) != (size_t)n) {
        s = st_fail(err, TP_ERR_IO, path, "cannot read the header: %s", ferror(f) ? strerror(errno) : "early end of file");
        goto fail;
    }
    st->data_size = fsize - 8 - n;
    if (st->data_size > (uint64_t)SIZE_MAX - 1) {
        s = st_fail(err, TP_ERR_OOM, path, "data section of %llu bytes does not fit in memory",
                    (unsigned long long)st->data_size);
        goto fail;
    }
    /* Validate the header before reading a possibly multi-GB data section for nothing. */
    s = parse_header(path, hdr, (size_t)n, st, err);
    free(hdr);
    hdr = NULL;
    if (s != TP_OK) goto fail;

    /* malloc(0) may return NULL, which would read as out of memory. */
    st->data = malloc(st->data_size ? (size_t)st->data_size : 1);
    if (!st->data) {
        s = st_fail(err, TP_ERR_OOM, path, "out of memory for the %llu-byte data section",
                    (unsigned long long)st->data_size);
        goto fail;
    }
    if (fread(st->data, 1, (size_t)st->data_size, f) != (size_t)st->data_size) {
        s = st_fail(err, TP_ERR_IO, path, "cannot read the data section: %s",
                    ferror(f) ? strerror(errno) : "early end of file (file changed while reading?)");
        goto fail;
    }
    size_t pl = strlen(path);
    st->path = malloc(pl + 1);
    if (!st->path) {
        s = st_fail(err, TP_ERR_OOM, path, "out of memory");
        goto fail;
    }
    memcpy(st->path, path, pl + 1);
    fclose(f);
    return TP_OK;

fail:
    free(hdr);
    fclose(f);
    tp_st_close(st);
    return s;
}

/* ---- loading model parameters ------------------------------------------------------------------------- */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted copies of the name pointers (names are not copied) for bsearch; NULL on allocation failure. */
static const char **sorted_file_names(const tp_safetensors *st) {
    const char **out = malloc((size_t)(st->n_tensors > 0 ? st->n_tensors : 1) * sizeof *out);
    if (!out) return NULL;
    for (int i = 0; i < st->n_tensors; i++) out[i] = st->tensors[i].name;
    qsort(out, (size_t)st->n_tensors, sizeof *out, cmp_str_ptr);
    return out;
}

static const char **sorted_spec_names(const tp_param_spec *specs, int n) {
    const char **out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) out[i] = specs[i].name;
    qsort(out, (size_t)n, sizeof *out, cmp_str_ptr);
    return out;
}

static int has_name(const char **sorted, int n, const char *name) {
    return bsearch(&name, sorted, (size_t)n, sizeof *sorted, cmp_str_ptr) != NULL;
}

static int shapes_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Checks run in this order and the first kind found is reported (with the count of others of that kind),
 * because names decide which tensors' shapes are even comparable: missing tensors, extra tensors, shape
 * mismatches, then dtypes that cannot be converted. Nothing is written to any dst unless every check passes. */
static tp_status check_params(const tp_safetensors *st, const tp_param_spec *specs, int n_specs, tp_error *err) {
    const char *path = st->path;
    char q1[QBUF], q2[QBUF], s1[SBUF], s2[SBUF];
    const char **file_sorted = NULL, **spec_sorted = NULL;
    tp_status s = TP_OK;
    file_sorted = sorted_file_names(st);
    spec_sorted = sorted_spec_names(specs, n_specs);
    if (!file_sorted || !spec_sorted) {
        s = st_fail(err, TP_ERR_OOM, path, "out of memory checking tensor names");
        goto done;
    }

    int n_missing = 0, first_missing = -1, n_extra = 0, first_extra = -1;
    for (int i = 0; i < n_specs; i++)
        if (!has_name(file_sorted, st->n_tensors, specs[i].name)) {
            if (first_missing < 0) first_missing = i;
            n_missing++;
        }
    for (int i = 0; i < st->n_tensors; i++)
        if (!has_name(spec_sorted, n_specs, st->tensors[i].name)) {
            if (first_extra < 0) first_extra = i;
            n_extra++;
        }
    if (n_missing > 0) {
        char more[48] = "", extra[QBUF + 96] = "";
        if (n_missing > 1) snprintf(more, sizeof more, " (and %d more)", n_missing - 1);
        /* Both at once usually means a checkpoint of another model or naming scheme: say so. */
        if (n_extra > 0)
            snprintf(extra, sizeof extra, "; the file also has %d tensor%s the model lacks, first '%s'", n_extra,
                     n_extra > 1 ? "s" : "", quote(q2, sizeof q2, st->tensors[first_extra].name));
        s = st_fail(err, TP_ERR_SHAPE, path, "missing tensor '%s'%s%s",
                    quote(q1, sizeof q1, specs[first_missing].name), more, extra);
        goto done;
    }
    if (n_extra > 0) {
        char more[48] = "";
        if (n_extra > 1) snprintf(more, sizeof more, " (and %d more)", n_extra - 1);
        s = st_fail(err, TP_ERR_SHAPE, path, "tensor '%s' is not a parameter of the model%s",
                    quote(q1, sizeof q1, st->tensors[first_extra].name), more);
        goto done;
    }

    int n_bad = 0, first_bad = -1;
    for (int i = 0; i < n_specs; i++) {
        const tp_st_tensor *t = tp_st_find(st, specs[i].name);
        CHECK(t != NULL);
        if (!shapes_equal(t->ndim, t->shape, specs[i].ndim, specs[i].shape)) {
            if (first_bad < 0) first_bad = i;
            n_bad++;
        }
    }
    if (n_bad > 0) {
        const tp_param_spec *sp = &specs[first_bad];
        const tp_st_tensor *t = tp_st_find(st, sp->name);
        char more[64] = "";
        if (n_bad > 1) snprintf(more, sizeof more, " (and %d more with another shape)", n_bad - 1);
        s = st_fail(err, TP_ERR_SHAPE, path, "tensor '%s': shape %s in file, model expects %s%s",
                    quote(q1, sizeof q1, sp->name), shape_str(s1, sizeof s1, t->ndim, t->shape),
                    shape_str(s2, sizeof s2, sp->ndim, sp->shape), more);
        goto done;
    }

    n_bad = 0;
    first_bad = -1;
    for (int i = 0; i < n_specs; i++) {
        const tp_st_tensor *t = tp_st_find(st, specs[i].name);
        if (t->dtype != TP_F32 && t->dtype != TP_F16 && t->dtype != TP_BF16) {
            if (first_bad < 0) first_bad = i;
            n_bad++;
        }
    }
    if (n_bad > 0) {
        const tp_st_tensor *t = tp_st_find(st, specs[first_bad].name);
        char more[48] = "";
        if (n_bad > 1) snprintf(more, sizeof more, " (and %d more)", n_bad - 1);
        s = st_fail(err, TP_ERR_SHAPE, path, "tensor '%s': dtype %s cannot be loaded (F32, F16 or BF16 only)%s",
                    quote(q1, sizeof q1, t->name), tp_dtype_info(t->dtype)->st_name, more);
        goto done;
    }
done:
    free(file_sorted);
    free(spec_sorted);
    return s;
}

tp_status tp_st_load_params(const char *path, const tp_param_spec *specs, int n_specs, tp_error *err) {
    CHECK(n_specs >= 0 && (specs != NULL || n_specs == 0));
    for (int i = 0; i < n_specs; i++) CHECK(specs[i].name && specs[i].ndim >= 0 && specs[i].ndim <= TP_ST_MAX_DIMS);
    tp_safetensors st;
    tp_status s = tp_st_open(path, &st, err);
    if (s != TP_OK) return s;
    s = check_params(&st, specs, n_specs, err);
    if (s == TP_OK) {
        for (int i = 0; i < n_specs; i++) {
            const tp_st_tensor *t = tp_st_find(&st, specs[i].name);
            size_t eb = tp_dtype_info(t->dtype)->bytes;
            size_t n = (size_t)((t->end - t->begin) / eb);
            if (n == 0) continue;
            CHECK(specs[i].dst != NULL);
            const unsigned char *src = st.data + t->begin;
            /* begin need not be a multiple of the element size, so 16-bit values are assembled from bytes
             * rather than read through a uint16_t pointer; F32 goes through memcpy inside the codec. */
            if (t->dtype == TP_F32) {
                tp_convert_to_f32(TP_F32, src, specs[i].dst, n, 1.0f);
            } else if (t->dtype == TP_F16) {
                for (size_t k = 0; k < n; k++)
                    specs[i].dst[k] = tp_f16_to_f32((uint16_t)(src[2 * k] | (src[2 * k + 1] << 8)));
            } else {
                for (size_t k = 0; k < n; k++)
                    specs[i].dst[k] = tp_bf16_to_f32((uint16_t)(src[2 * k] | (src[2 * k + 1] << 8)));
            }
        }
    }
    tp_st_close(&st);
    return s;
}

/* ---- writing ------------------------------------------------------------------------------------------ */

static tp_status write_all(FILE *f, const void *p, size_t n, const char *path, const char *what, tp_error *err) {
    if (n && fwrite(p, 1, n, f) != n) return st_fail(err, TP_ERR_IO, path, "cannot write the %s: %s", what, strerror(errno));
    return TP_OK;
}

/* Builds the header object; on success *root owns it and sizes[i] holds each entry's byte count. */
static tp_status build_header(const char *path, const tp_st_write_entry *e, int n, uint64_t *sizes, json_t **root,
                              tp_error *err) {
    char qn[QBUF];
    *root = json_object();
    if (!*root) return st_fail(err, TP_ERR_OOM, path, "out of memory building the header");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const tp_st_write_entry *x = &e[i];
        if (!x->name) return st_fail(err, TP_ERR_ARG, path, "entry %d has no name", i);
        if (!utf8_valid(x->name))
            return st_fail(err, TP_ERR_ARG, path, "tensor '%s': name is not valid UTF-8", quote(qn, sizeof qn, x->name));
        quote(qn, sizeof qn, x->name);
        if (strcmp(x->name, "__metadata__") == 0)
            return st_fail(err, TP_ERR_ARG, path, "tensor name '__metadata__' is reserved by the format");
        if (json_object_get(*root, x->name))
            return st_fail(err, TP_ERR_ARG, path, "tensor '%s' appears twice", qn);
        const tp_dtype_traits *tr = tp_dtype_info(x->dtype);
        if (!tr) return st_fail(err, TP_ERR_ARG, path, "tensor '%s': invalid dtype %d", qn, (int)x->dtype);
        if (x->ndim < 0 || x->ndim > TP_ST_MAX_DIMS)
            return st_fail(err, TP_ERR_ARG, path, "tensor '%s': ndim %d out of range 0..%d", qn, x->ndim,
                           TP_ST_MAX_DIMS);
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] < 0)
                return st_fail(err, TP_ERR_ARG, path, "tensor '%s': shape[%d] is negative (%lld)", qn, d,
                               (long long)x->shape[d]);
        uint64_t numel, bytes;
        /* json_int_t is signed 64-bit, so offsets must stay within INT64_MAX. */
        if (shape_numel(x->ndim, x->shape, tr->bytes, &numel, &bytes) != 0 || bytes > (uint64_t)INT64_MAX - off ||
            bytes > SIZE_MAX)
            return st_fail(err, TP_ERR_ARG, path, "tensor '%s': too many bytes", qn);
        if (bytes > 0 && !x->data) return st_fail(err, TP_ERR_ARG, path, "tensor '%s': no data", qn);
        sizes[i] = bytes;

        json_t *ent = json_object(), *shape = json_array(), *offs = json_array();
        int bad = !ent || !shape || !offs;
        for (int d = 0; !bad && d < x->ndim; d++) bad = json_array_append_new(shape, json_integer(x->shape[d])) != 0;
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) != 0;
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)(off + bytes))) != 0;
        /* Field order as the reference writer: dtype, shape, data_offsets. */
        bad = bad || json_object_set_new(ent, "dtype", json_string(tr->st_name)) != 0;
        if (!bad) {
            bad = json_object_set_new(ent, "shape", shape) != 0;
            shape = NULL; /* set_new consumed it, even on failure */
        }
        if (!bad) {
            bad = json_object_set_new(ent, "data_offsets", offs) != 0;
            offs = NULL;
        }
        json_decref(shape);
        json_decref(offs);
        if (!bad) {
            bad = json_object_set_new(*root, x->name, ent) != 0;
            ent = NULL;
        }
        json_decref(ent);
        if (bad) return st_fail(err, TP_ERR_OOM, path, "out of memory building the header");
        off += bytes;
    }
    return TP_OK;
}

tp_status tp_st_write(const char *path, const tp_st_write_entry *entries, int n, tp_error *err) {
    if (!path) return tp_fail(err, TP_ERR_ARG, "safetensors: no path given");
    if (n < 0 || (n > 0 && !entries)) return st_fail(err, TP_ERR_ARG, path, "bad entry list (%d entries)", n);
    uint64_t *sizes = malloc((size_t)(n > 0 ? n : 1) * sizeof *sizes);
    if (!sizes) return st_fail(err, TP_ERR_OOM, path, "out of memory");
    json_t *root = NULL;
    char *hdr = NULL;
    FILE *f = NULL;
    tp_outfile out = {0};
    tp_status s = build_header(path, entries, n, sizes, &root, err);
    if (s != TP_OK) goto done;
    hdr = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
    if (!hdr) {
        s = st_fail(err, TP_ERR_OOM, path, "out of memory serializing the header");
        goto done;
    }
    size_t hl = strlen(hdr);
    /* Readers may map the data section and view it as typed arrays: 8 + N a multiple of 8 keeps every
     * tensor of 8-byte-or-smaller elements aligned when its offset is (reference writer's rule). */
    size_t pad = (8 - (8 + hl) % 8) % 8;
    uint64_t N = (uint64_t)hl + pad;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(N >> (8 * i));
    static const char spaces[8] = "        ";

    /* through a temporary file renamed into place: a failed write leaves whatever path held, and never a
     * truncated file that a later run would take for a checkpoint */
    if ((s = tp_outfile_open(&out, path, "the safetensors file", err)) != TP_OK) goto done;
    f = out.f;
    if ((s = write_all(f, lb, 8, path, "header length", err)) != TP_OK) goto done;
    if ((s = write_all(f, hdr, hl, path, "header", err)) != TP_OK) goto done;
    if ((s = write_all(f, spaces, pad, path, "header", err)) != TP_OK) goto done;
    for (int i = 0; i < n; i++) {
        if ((s = write_all(f, entries[i].data, (size_t)sizes[i], path, "tensor data", err)) != TP_OK) goto done;
    }
    f = NULL;
    s = tp_outfile_commit(&out, err); /* a full disk may only show at the final flush */

done:
    if (f) tp_outfile_abort(&out);
    free(hdr);
    json_decref(root);
    free(sizes);
    return s;
}
