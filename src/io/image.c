/* image.c: image decoding (stb_image) and timm's eval preprocessing (stb_image_resize v1).
 *
 * Pipeline, step by step as timm/torchvision do it on a PIL image:
 *   1. decode to 8-bit RGB (PIL: Image.open(...).convert("RGB"); gray is replicated, alpha dropped without
 *      compositing, exactly what stbi_load(..., 3) does; 16-bit PNGs are reduced to 8 bits);
 *   2. Resize(scale_size) with scale_size = floor(img_size / crop_pct): the shorter side becomes scale_size,
 *      the longer int(scale_size * long / short) (torchvision _compute_resized_output_size truncates);
 *      bicubic on the 8-bit values with the result rounded back to 8 bits, as PIL does;
 *   3. CenterCrop(img_size): offset int(round((h - crop) / 2.0)) with Python's round (ties to even); where the
 *      resized image is smaller than the crop (crop_pct > 1), torchvision zero-pads first, so those pixels are
 *      0 before normalization;
 *   4. ToTensor (/255 in fp32) and Normalize ((x - mean) / std in fp32), CHW.
 * Differences from timm that remain: stb's JPEG decoder (IDCT, chroma upsampling) is not libjpeg's; stb's
 * Catmull-Rom resampler computes in float where PIL uses 22-bit fixed point (1 level apart at most, rarely);
 * and at the image border stb clamps (repeats the edge pixel) where PIL drops the taps outside the image and
 * renormalizes, so the 2 outermost rows/columns of the resized image can differ by several levels where the
 * content near the border has strong contrast. The border is only inside the crop when crop_pct is 1.
 * Measured against PIL 13 on synthetic PNGs: identical except those (mean |diff| < 0.02 levels). Never a
 * difference in size, crop position or normalization.
 *
 * Only the crop window of the resized image is computed (stbir_resize_subpixel with the crop offset as the
 * shift; checked bit-identical to a full resize followed by the crop), so an image with an extreme aspect ratio cannot blow up memory: the resized full image of a
 * 1 x 100000 strip would be gigabytes, the crop never exceeds img_size^2 * 3 bytes. */
#include "io/image.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Only the formats the folder filter admits are compiled in: less decoder surface fed with arbitrary files,
 * and a single file of another type fails the same way a folder would skip it. stb_image stays extern
 * (STB_IMAGE_STATIC makes this stb version warn about prototypes it never defines), so this must remain the
 * only file of the project that defines STB_IMAGE_IMPLEMENTATION; the resizer is private to this file. */
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG /* "Image not of any known type, or corrupt" rather than "unknown image type" */
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#endif
#include <stb_image.h>
#include <stb_image_resize.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* Checks what the arithmetic below relies on; bad values are user input (a preset or --crop-pct), hence a
 * status, not a CHECK. */
static tp_status check_preprocess(const tp_preprocess *pp, tp_error *err) {
    if (!pp) return tp_fail(err, TP_ERR_ARG, "image preprocessing: no parameters given");
    if (pp->img_size < 1 || pp->img_size > 16384)
        return tp_fail(err, TP_ERR_ARG, "image preprocessing: img_size %d out of range [1, 16384]", pp->img_size);
    if (!(pp->crop_pct > 0.0) || !isfinite(pp->crop_pct))
        return tp_fail(err, TP_ERR_ARG, "image preprocessing: crop_pct %g must be a positive number", pp->crop_pct);
    double scale = floor((double)pp->img_size / pp->crop_pct);
    if (scale < 1.0 || scale > 65536.0)
        return tp_fail(err, TP_ERR_ARG, "image preprocessing: img_size %d / crop_pct %g gives resize size %.0f",
                       pp->img_size, pp->crop_pct, scale);
    for (int c = 0; c < 3; c++)
        if (!isfinite(pp->mean[c]) || !isfinite(pp->std[c]) || pp->std[c] == 0.0f)
            return tp_fail(err, TP_ERR_ARG, "image preprocessing: mean[%d] = %g, std[%d] = %g invalid", c,
                           (double)pp->mean[c], c, (double)pp->std[c]);
    return TP_OK;
}

/* torchvision CenterCrop offset of a crop of side `crop` in a side of `size`: int(round((size - crop) / 2.0))
 * with Python 3's round, which ties to even (d = 3 gives 2, d = 1 gives 0); negative when the side must be
 * padded, -floor((crop - size) / 2) being the left/top padding torchvision adds. */
static long crop_offset(long size, long crop) {
    long d = size - crop;
    if (d < 0) return -((-d) / 2);
    long k = d / 2;
    if ((d & 1) && (k & 1)) k++; /* d/2 = k + 0.5 exactly: the even neighbour */
    return k;
}

/* One stb resampling call: Catmull-Rom, clamped edges, on the 8-bit values. scale is output/input size of
 * the full resize, shift (output pixels) selects the window of it that out receives: output pixel x samples
 * the input at (x + shift + 0.5) / scale - 0.5, i.e. it is pixel x + shift of the full resize. An axis with
 * scale 1 and shift 0 is the identity (the kernel is 1 at 0 and 0 at every other integer). Returns 0 when
 * stb cannot allocate its buffers. */
static int resample(const unsigned char *in, int in_w, int in_h, int in_stride, unsigned char *out, int out_w,
                    int out_h, float scale_x, float scale_y, float shift_x, float shift_y) {
    return stbir_resize_subpixel(in, in_w, in_h, in_stride, out, out_w, out_h, 0, STBIR_TYPE_UINT8, 3,
                                 STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP, STBIR_EDGE_CLAMP,
                                 STBIR_FILTER_CATMULLROM, STBIR_FILTER_CATMULLROM, STBIR_COLORSPACE_LINEAR, NULL,
                                 scale_x, scale_y, shift_x, shift_y);
}

/* Resizes and crops the 8-bit RGB image src (h, w, 3) into dst (3, S, S) fp32, normalized. */
static tp_status preprocess(const char *path, const unsigned char *src, int w, int h, const tp_preprocess *pp,
                            float *dst, tp_error *err) {
    const long S = pp->img_size;
    const long scale = (long)floor((double)pp->img_size / pp->crop_pct);
    /* Resize(int): the shorter side becomes `scale`; int(scale * long / short) in Python is a correctly
     * rounded true division then truncation, which the double division below reproduces exactly (the
     * product is an integer far below 2^53). */
    long new_w, new_h;
    if (w <= h) {
        new_w = scale;
        new_h = (long)((double)(scale * (long long)h) / (double)w);
    } else {
        new_h = scale;
        new_w = (long)((double)(scale * (long long)w) / (double)h);
    }
    if (new_w < 1 || new_h < 1 || new_w > INT_MAX / 4 || new_h > INT_MAX / 4)
        return tp_fail(err, TP_ERR_FORMAT, "%s: image %dx%d cannot be resized to a short side of %ld", path, w, h,
                       scale);

    /* Window of the resized image that the crop covers, and where it lands in the crop (padding offset). */
    const long top = crop_offset(new_h, S), left = crop_offset(new_w, S);
    const long y0 = top < 0 ? 0 : top, x0 = left < 0 ? 0 : left;        /* first resized row/col used */
    const long oy = top < 0 ? -top : 0, ox = left < 0 ? -left : 0;      /* where it lands in the crop */
    const long ch = (new_h < S ? new_h : S), cw = (new_w < S ? new_w : S); /* window size */

    unsigned char *win = malloc((size_t)ch * (size_t)cw * 3);
    if (!win) return tp_fail(err, TP_ERR_OOM, "%s: out of host memory for a %ldx%ld crop", path, cw, ch);

    /* Two separable passes with an 8-bit image in between, horizontal first, each skipped when its axis keeps
     * its size: PIL's ImagingResample does exactly this, and the intermediate rounding and clamping to
     * [0, 255] matters where the cubic overshoots (noise, hard edges; up to 20 levels apart on random pixels
     * in a one-pass float resize). Only the columns x0 .. x0+cw-1 of the horizontal pass are computed. */
    const unsigned char *mid = src + (size_t)x0 * 3; /* (cw, h) window of the horizontally resized image */
    int mid_stride = w * 3;
    unsigned char *tmp = NULL;
    if (new_w != w) {
        tmp = malloc((size_t)cw * (size_t)h * 3);
        if (!tmp) {
            free(win);
            return tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
        }
        if (!resample(src, w, h, w * 3, tmp, (int)cw, h, (float)new_w / (float)w, 1.0f, (float)x0, 0.0f)) {
            free(tmp);
            free(win);
            return tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
        }
        mid = tmp;
        mid_stride = (int)cw * 3;
    }
    if (new_h != h) {
        if (!resample(mid, (int)cw, h, mid_stride, win, (int)cw, (int)ch, 1.0f, (float)new_h / (float)h, 0.0f,
                      (float)y0)) {
            free(tmp);
            free(win);
            return tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
        }
    } else {
        for (long y = 0; y < ch; y++)
            memcpy(win + (size_t)y * cw * 3, mid + (size_t)(y + y0) * mid_stride, (size_t)cw * 3);
    }
    free(tmp);

    /* fp32 arithmetic in torchvision's order: ToTensor divides by 255, Normalize subtracts then divides. */
    for (int c = 0; c < 3; c++) {
        const float mean = pp->mean[c], sd = pp->std[c];
        const float pad = (0.0f - mean) / sd; /* torchvision pads with 0 before normalization */
        float *plane = dst + (size_t)c * S * S;
        for (long y = 0; y < S; y++) {
            float *row = plane + (size_t)y * S;
            long wy = y - oy;
            for (long x = 0; x < S; x++) {
                long wx = x - ox;
                if (wy < 0 || wy >= ch || wx < 0 || wx >= cw) {
                    row[x] = pad;
                } else {
                    float v = (float)win[((size_t)wy * cw + (size_t)wx) * 3 + c] / 255.0f;
                    row[x] = (v - mean) / sd;
                }
            }
        }
    }
    free(win);
    return TP_OK;
}

tp_status tp_image_load(const char *path, const tp_preprocess *pp, float *dst, tp_error *err) {
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "image: no path given");
    if (!dst) return tp_fail(err, TP_ERR_ARG, "image %s: no output buffer", path);
    tp_status st = check_preprocess(pp, err);
    if (st != TP_OK) return st;

    /* Opening ourselves separates "missing/unreadable" (an I/O error naming errno) from "not an image". */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tp_fail(err, TP_ERR_IO, "cannot open image %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return tp_fail(err, TP_ERR_IO, "cannot open image %s: is a directory", path);
    FILE *f = fopen(path, "rb");
    if (!f) return tp_fail(err, TP_ERR_IO, "cannot open image %s: %s", path, strerror(errno));
    int w = 0, h = 0, n = 0;
    unsigned char *px = stbi_load_from_file(f, &w, &h, &n, 3);
    fclose(f);
    if (!px) {
        const char *why = stbi_failure_reason();
        if (why && (!strcmp(why, "Out of memory") || !strcmp(why, "outofmem")))
            return tp_fail(err, TP_ERR_OOM, "%s: out of host memory while decoding", path);
        return tp_fail(err, TP_ERR_FORMAT, "%s: not a decodable PNG/JPEG/BMP image (%s)", path,
                       why ? why : "unknown reason");
    }
    if (w < 1 || h < 1) {
        stbi_image_free(px);
        return tp_fail(err, TP_ERR_FORMAT, "%s: image has no pixels (%dx%d)", path, w, h);
    }
    st = preprocess(path, px, w, h, pp, dst, err);
    stbi_image_free(px);
    return st;
}

/* Extension filter of folder mode, case-insensitive so that IMG_0001.JPG counts. */
static int has_image_ext(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    static const char *const exts[] = {"png", "jpg", "jpeg", "bmp"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        const char *a = dot + 1, *b = exts[i];
        while (*a && *b && tolower((unsigned char)*a) == *b) a++, b++;
        if (!*a && !*b) return 1;
    }
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    /* Byte order, as Python's sorted() on str orders ASCII names: reproducible, locale-independent. */
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Lists the image files (regular files after following links) of folder `dir`, sorted. */
static tp_status list_images(const char *dir, char ***out, size_t *count, tp_error *err) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return tp_fail(err, TP_ERR_IO, "cannot open folder %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    size_t dlen = strlen(dir);
    struct dirent *e;
    tp_status st = TP_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !has_image_ext(e->d_name)) continue; /* hidden files too: ._x.jpg */
        size_t len = dlen + 1 + strlen(e->d_name) + 1;
        char *full = malloc(len);
        if (!full) {
            st = tp_fail(err, TP_ERR_OOM, "listing folder %s: out of host memory", dir);
            break;
        }
        snprintf(full, len, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) { /* a folder named x.png, a dangling link */
            free(full);
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **nn = realloc(names, ncap * sizeof *nn);
            if (!nn) {
                free(full);
                st = tp_fail(err, TP_ERR_OOM, "listing folder %s: out of host memory", dir);
                break;
            }
            names = nn;
            cap = ncap;
        }
        names[n++] = full;
    }
    closedir(d);
    if (st != TP_OK) {
        free_names(names, n);
        return st;
    }
    if (n == 0) {
        free(names);
        return tp_fail(err, TP_ERR_IO, "folder %s has no image files (.png, .jpg, .jpeg, .bmp)", dir);
    }
    qsort(names, n, sizeof *names, cmp_names);
    *out = names;
    *count = n;
    return TP_OK;
}

tp_status tp_image_load_batch(const char *path, const tp_preprocess *pp, int B, float *dst, int *n_files,
                              tp_error *err) {
    if (n_files) *n_files = 0;
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "image: no path given");
    if (B < 1) return tp_fail(err, TP_ERR_ARG, "image batch from %s: batch size %d must be >= 1", path, B);
    if (!dst) return tp_fail(err, TP_ERR_ARG, "image batch from %s: no output buffer", path);
    tp_status st = check_preprocess(pp, err);
    if (st != TP_OK) return st;
    const size_t per = (size_t)3 * (size_t)pp->img_size * (size_t)pp->img_size;

    struct stat sb;
    if (stat(path, &sb) != 0) return tp_fail(err, TP_ERR_IO, "cannot open %s: %s", path, strerror(errno));

    int used;
    if (!S_ISDIR(sb.st_mode)) {
        st = tp_image_load(path, pp, dst, err);
        if (st != TP_OK) return st;
        used = 1;
    } else {
        char **names;
        size_t count;
        st = list_images(path, &names, &count, err);
        if (st != TP_OK) return st;
        /* Each distinct file is decoded once; the rest of the batch copies it. */
        used = count < (size_t)B ? (int)count : B;
        for (int i = 0; i < used && st == TP_OK; i++) st = tp_image_load(names[i], pp, dst + (size_t)i * per, err);
        free_names(names, count);
        if (st != TP_OK) return st;
    }
    for (int i = used; i < B; i++) memcpy(dst + (size_t)i * per, dst + (size_t)(i % used) * per, per * sizeof *dst);
    if (n_files) *n_files = used;
    return TP_OK;
}
