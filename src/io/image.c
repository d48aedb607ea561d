/* image.c: image decoding (stb_image) and timm's eval preprocessing with Pillow's resampling arithmetic.
 *
 * Pipeline, step by step as timm/torchvision do it on a PIL image (image.h says where each rule comes from):
 *   1. decode to 8-bit RGB as PIL's Image.open(...).convert("RGB") would;
 *   2. resize to (new_w, new_h) (Resize(int) or, in squash mode, Resize((s, s))) with Pillow's algorithm;
 *   3. CenterCrop(S) with zero padding where the resized image is smaller;
 *   4. ToTensor (/255 in fp32) and Normalize ((x - mean) / std in fp32), CHW.
 *
 * The resampling is an implementation of the algorithm of Pillow libImaging/Resample.c (ImagingResample), written
 * for this file: per output pixel i of an axis, centre (i + 0.5) * in/out, support filter_support * max(in/out,
 * 1), taps [round(centre - support), round(centre + support)) clipped to the image (so the border pixels see
 * fewer taps, renormalized, rather than repeated edge pixels), weights filter((tap - centre + 0.5) / max(in/out,
 * 1)) divided by their sum, then rounded half away from zero to 22-bit fixed point (8 bits of result, 2 of
 * headroom for the negative lobes, in a 32-bit int); a pass sums value * weight onto 1 << 21 (the rounding
 * half), shifts right by 22 and clamps to [0, 255]. The double arithmetic is written in the same operation order
 * as Pillow's, so that the weights are the same doubles and their fixed-point rounding the same integers: that is
 * what makes the result identical, not merely close. That relies on no a * b + c being contracted into an FMA:
 * GCC in -std=c11 mode does not (-ffp-contract=off), clang is told so below. (Checked on x86-64, where Pillow's
 * wheels do not contract either.)
 *
 * Only the crop window of the resized image is computed. A window of an axis's outputs uses exactly the weights
 * of those outputs, so computing the window is the same as resizing everything and cropping; the intermediate
 * image of the two passes is restricted to the rows (horizontal pass first) or columns (vertical first) the
 * second pass reads, as Pillow restricts it to rows. */
#include "io/image.h"
#include "core/files.h"

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

/* stb_image's declarations; its implementation, with the decoders it compiles in, is stb_image_impl.c */
#include <stb_image.h>

/* ---- names ------------------------------------------------------------------------------------------- */

static const char *const interp_names[TP_INTERP_COUNT] = {"bicubic", "bilinear", "nearest"};
static const char *const crop_mode_names[TP_CROP_COUNT] = {"center", "squash"};

const char *tp_interp_name(tp_interp i) { return (unsigned)i < TP_INTERP_COUNT ? interp_names[i] : "?"; }

int tp_interp_parse(const char *s) {
    for (int i = 0; s && i < TP_INTERP_COUNT; i++)
        if (!strcmp(s, interp_names[i])) return i;
    return -1;
}

const char *tp_crop_mode_name(tp_crop_mode m) { return (unsigned)m < TP_CROP_COUNT ? crop_mode_names[m] : "?"; }

int tp_crop_mode_parse(const char *s) {
    for (int i = 0; s && i < TP_CROP_COUNT; i++)
        if (!strcmp(s, crop_mode_names[i])) return i;
    return -1;
}

/* Checks what the arithmetic below relies on; bad values are user input (a preset, a config.json, an option),
 * hence a status, not a CHECK. */
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
    if ((unsigned)pp->interpolation >= TP_INTERP_COUNT)
        return tp_fail(err, TP_ERR_ARG, "image preprocessing: interpolation %d is not one of bicubic (0), "
                       "bilinear (1), nearest (2)", (int)pp->interpolation);
    if (pp->pillow_version < 0)
        return tp_fail(err, TP_ERR_ARG, "image preprocessing: pillow_version %d must be 0 (the newest) or a Pillow "
                       "major version", pp->pillow_version);
    if ((unsigned)pp->crop_mode >= TP_CROP_COUNT)
        return tp_fail(err, TP_ERR_ARG, "image preprocessing: crop_mode %d is not one of center (0), squash (1)",
                       (int)pp->crop_mode);
    return TP_OK;
}

/* ---- Pillow's filters and weights (libImaging/Resample.c) --------------------------------------------- */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* clang contracts within an expression by default; GCC in ISO mode does not */
#endif

/* Keys' cubic convolution kernel with a = -0.5. Pillow writes the polynomials with a symbolic a; with a = -0.5
 * the constants a + 2 = 1.5 and a + 3 = 2.5 are exact and the final product by a = -0.5 only flips the sign and
 * halves, so these expressions give the same doubles as Pillow's, operation for operation. */
static double filter_bicubic(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return (1.5 * x - 2.5) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * -0.5;
    return 0.0;
}

/* The triangle (tent) kernel. */
static double filter_bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

#define FIXED_BITS 22 /* Pillow's PRECISION_BITS: 32 - 8 result bits - 2 bits of headroom */

/* Fixed-point weights of a window [out0, out0 + n) of one axis's outputs. Output i reads inputs
 * first[i] .. first[i] + count[i] - 1 with weights w[i * taps ...]. */
typedef struct {
    long n;
    int taps; /* the stride of w: 2 * ceil(support) + 1, Pillow's ksize */
    int *first, *count;
    int32_t *w;
} axis_weights;

static void axis_weights_free(axis_weights *aw) {
    free(aw->first);
    free(aw->count);
    free(aw->w);
    memset(aw, 0, sizeof *aw);
}

/* Pillow's precompute_coeffs followed by its 8-bit normalization, for the window only. in_size and out_size
 * are the full axis sizes (the weights depend on their ratio). Returns 0 when out of memory. */
static int axis_weights_make(axis_weights *aw, long in_size, long out_size, long out0, long n, tp_interp interp) {
    memset(aw, 0, sizeof *aw);
    double (*filter)(double) = interp == TP_INTERP_BILINEAR ? filter_bilinear : filter_bicubic;
    const double filter_support = interp == TP_INTERP_BILINEAR ? 1.0 : 2.0;
    /* Pillow takes the ratio from its float box (0, 0, w, h): (double)(float)in_size, exact below 2^24. */
    const double scale = (double)in_size / (double)out_size;
    const double fscale = scale < 1.0 ? 1.0 : scale; /* downscaling widens the kernel: antialiasing */
    const double support = filter_support * fscale;
    const double inv_fscale = 1.0 / fscale;
    const double ksz = ceil(support) * 2.0 + 1.0;
    if (ksz > (double)INT_MAX / 8) return 0;
    const int taps = (int)ksz;
    aw->n = n;
    aw->taps = taps;
    aw->first = malloc((size_t)n * sizeof *aw->first);
    aw->count = malloc((size_t)n * sizeof *aw->count);
    aw->w = malloc((size_t)n * (size_t)taps * sizeof *aw->w);
    double *k = malloc((size_t)taps * sizeof *k);
    if (!aw->first || !aw->count || !aw->w || !k) {
        free(k);
        axis_weights_free(aw);
        return 0;
    }
    for (long i = 0; i < n; i++) {
        const double c = ((double)(out0 + i) + 0.5) * scale; /* Pillow adds its box origin, 0.0: exact */
        /* (int) truncates, as Pillow's "round" by + 0.5 does; negatives are clipped right after. */
        int lo = (int)(c - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(c + support + 0.5);
        if (hi > in_size) hi = (int)in_size;
        const int cnt = hi - lo;
        double sum = 0.0;
        for (int t = 0; t < cnt; t++) {
            /* ((tap index) - centre + 0.5) in this order: the operation order of Pillow, for identical doubles */
            k[t] = filter(((double)(t + lo) - c + 0.5) * inv_fscale);
            sum += k[t];
        }
        if (sum != 0.0)
            for (int t = 0; t < cnt; t++) k[t] /= sum;
        int32_t *w = aw->w + (size_t)i * (size_t)taps;
        for (int t = 0; t < cnt; t++) /* to fixed point, rounding half away from zero */
            w[t] = (int32_t)(k[t] < 0.0 ? -0.5 + k[t] * (double)(1 << FIXED_BITS)
                                        : 0.5 + k[t] * (double)(1 << FIXED_BITS));
        aw->first[i] = lo;
        aw->count[i] = cnt;
    }
    free(k);
    return 1;
}

/* Pillow's clip8: the accumulator shifted down to 8 bits, clamped. A negative sum clamps to 0 before the shift,
 * which is what Pillow's arithmetic shift and lookup table give too. */
static inline unsigned char clip_fixed(int32_t s) {
    if (s < 0) return 0;
    s >>= FIXED_BITS;
    return s > 255 ? 255 : (unsigned char)s;
}

/* Horizontal pass: rows of `in` (3 bytes a pixel, stride in_stride, column 0 = input column col0) into out
 * (aw->n pixels a row). The sums fit in 32 bits: 255 * (sum of |weight|, at most ~1.3 * 2^22) < 2^31. */
static void pass_horizontal(const unsigned char *in, size_t in_stride, long col0, long rows, const axis_weights *aw,
                            unsigned char *out, size_t out_stride) {
    for (long r = 0; r < rows; r++) {
        const unsigned char *src = in + (size_t)r * in_stride;
        unsigned char *dst = out + (size_t)r * out_stride;
        for (long i = 0; i < aw->n; i++) {
            const int32_t *w = aw->w + (size_t)i * (size_t)aw->taps;
            const unsigned char *p = src + (size_t)(aw->first[i] - col0) * 3;
            int32_t s0 = 1 << (FIXED_BITS - 1), s1 = s0, s2 = s0;
            for (int t = 0; t < aw->count[i]; t++) {
                s0 += p[3 * t + 0] * w[t];
                s1 += p[3 * t + 1] * w[t];
                s2 += p[3 * t + 2] * w[t];
            }
            dst[3 * i + 0] = clip_fixed(s0);
            dst[3 * i + 1] = clip_fixed(s1);
            dst[3 * i + 2] = clip_fixed(s2);
        }
    }
}

/* Vertical pass: `cols` pixels of the rows of `in` (row 0 = input row row0) into aw->n rows of out. Integer
 * sums are exact, so accumulating a whole row tap by tap (cache-friendly) equals Pillow's column-wise loop. */
static int pass_vertical(const unsigned char *in, size_t in_stride, long row0, long cols, const axis_weights *aw,
                         unsigned char *out, size_t out_stride) {
    const size_t nv = (size_t)cols * 3;
    int32_t *acc = malloc(nv * sizeof *acc);
    if (!acc) return 0;
    for (long i = 0; i < aw->n; i++) {
        const int32_t *w = aw->w + (size_t)i * (size_t)aw->taps;
        for (size_t v = 0; v < nv; v++) acc[v] = 1 << (FIXED_BITS - 1);
        for (int t = 0; t < aw->count[i]; t++) {
            const unsigned char *row = in + (size_t)(aw->first[i] - row0 + t) * in_stride;
            const int32_t wt = w[t];
            for (size_t v = 0; v < nv; v++) acc[v] += row[v] * wt;
        }
        unsigned char *dst = out + (size_t)i * out_stride;
        for (size_t v = 0; v < nv; v++) dst[v] = clip_fixed(acc[v]);
    }
    free(acc);
    return 1;
}

/* Pillow's nearest-neighbour scaler (libImaging/Geometry.c, ImagingScaleAffine, reached from Image.resize with
 * NEAREST): the source index of output x is (int)pos with pos = a / 2 + a + a + ... (x additions of a = in/out,
 * accumulated in double, so the rounding of the sum is part of the result); an index outside the image leaves
 * the pixel 0. idx receives the indices of the window [out0, out0 + n), -1 for those. */
static void nearest_indices(long in_size, long out_size, long out0, long n, long *idx) {
    const double a = (double)in_size / (double)out_size;
    double pos = a * 0.5;
    for (long x = 0; x < out0 + n; x++, pos += a) {
        if (x < out0) continue;
        long v = pos < 0.0 ? -1 : (long)pos;
        idx[x - out0] = v < in_size ? v : -1;
    }
}

/* Writes the window [x0, x0 + cw) x [y0, y0 + ch) of the RGB image src (w x h, 3 bytes a pixel) resized to
 * new_w x new_h into win (ch rows of cw pixels). */
static tp_status resize_window(const char *path, const unsigned char *src, int w, int h, long new_w, long new_h,
                               long x0, long y0, long cw, long ch, tp_interp interp, int pillow_version,
                               unsigned char *win, tp_error *err) {
    const size_t stride = (size_t)w * 3, wstride = (size_t)cw * 3;
    if (new_w == w && new_h == h) { /* torchvision returns the image itself; PIL would copy it */
        for (long y = 0; y < ch; y++)
            memcpy(win + (size_t)y * wstride, src + (size_t)(y + y0) * stride + (size_t)x0 * 3, wstride);
        return TP_OK;
    }
    tp_status st = TP_OK;
    if (interp == TP_INTERP_NEAREST) {
        long *ix = malloc((size_t)cw * sizeof *ix), *iy = malloc((size_t)ch * sizeof *iy);
        if (!ix || !iy) {
            st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
        } else {
            nearest_indices(w, new_w, x0, cw, ix);
            nearest_indices(h, new_h, y0, ch, iy);
            for (long y = 0; y < ch; y++)
                for (long x = 0; x < cw; x++) {
                    unsigned char *d = win + (size_t)y * wstride + (size_t)x * 3;
                    if (iy[y] < 0 || ix[x] < 0) d[0] = d[1] = d[2] = 0;
                    else memcpy(d, src + (size_t)iy[y] * stride + (size_t)ix[x] * 3, 3);
                }
        }
        free(ix);
        free(iy);
        return st;
    }

    /* Pillow skips the pass of an axis that keeps its size, and (since Pillow 13) runs the vertical pass first
     * when the height loses more than twice as many pixels as the width, to make the horizontal pass cheaper;
     * Pillow 12 and older always start with the horizontal pass. The order is part of the result: the
     * intermediate image is rounded to 8 bits and clamped. */
    const int need_h = new_w != w, need_v = new_h != h;
    const int legacy = pillow_version >= 1 && pillow_version <= 12;
    const int h_first = legacy || !((h - new_h) > 0 && (h - new_h) > ((long)w - new_w) * 2);
    axis_weights hw = {0}, vw = {0};
    unsigned char *tmp = NULL;
    if ((need_h && !axis_weights_make(&hw, w, new_w, x0, cw, interp)) ||
        (need_v && !axis_weights_make(&vw, h, new_h, y0, ch, interp))) {
        st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
        goto done;
    }
    if (!need_v) {
        pass_horizontal(src + (size_t)y0 * stride, stride, 0, ch, &hw, win, wstride);
    } else if (!need_h) {
        if (!pass_vertical(src + (size_t)x0 * 3, stride, 0, cw, &vw, win, wstride))
            st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
    } else if (h_first) {
        /* the input rows the vertical pass reads, for the window's rows */
        long r0 = LONG_MAX, r1 = 0;
        for (long i = 0; i < ch; i++) {
            if (vw.first[i] < r0) r0 = vw.first[i];
            if (vw.first[i] + vw.count[i] > r1) r1 = vw.first[i] + vw.count[i];
        }
        if (r1 <= r0) r0 = r1 = 0;
        tmp = malloc((size_t)(r1 - r0) * wstride + 1);
        if (!tmp) {
            st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
            goto done;
        }
        pass_horizontal(src + (size_t)r0 * stride, stride, 0, r1 - r0, &hw, tmp, wstride);
        if (!pass_vertical(tmp, wstride, r0, cw, &vw, win, wstride))
            st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
    } else {
        /* the input columns the horizontal pass reads, for the window's columns */
        long c0 = LONG_MAX, c1 = 0;
        for (long i = 0; i < cw; i++) {
            if (hw.first[i] < c0) c0 = hw.first[i];
            if (hw.first[i] + hw.count[i] > c1) c1 = hw.first[i] + hw.count[i];
        }
        if (c1 <= c0) c0 = c1 = 0;
        const size_t tstride = (size_t)(c1 - c0) * 3;
        tmp = malloc((size_t)ch * tstride + 1);
        if (!tmp) {
            st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
            goto done;
        }
        if (!pass_vertical(src + (size_t)c0 * 3, stride, 0, c1 - c0, &vw, tmp, tstride))
            st = tp_fail(err, TP_ERR_OOM, "%s: out of host memory resizing %dx%d", path, w, h);
        else
            pass_horizontal(tmp, tstride, c0, ch, &hw, win, wstride);
    }
done:
    free(tmp);
    axis_weights_free(&hw);
    axis_weights_free(&vw);
    return st;
}

/* ---- crop and normalization -------------------------------------------------------------------------- */

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

/* Resizes and crops the 8-bit RGB image src (h, w, 3) into rgb (S, S, 3), zero where the crop pads. */
static tp_status resize_crop(const char *path, const unsigned char *src, int w, int h, const tp_preprocess *pp,
                             unsigned char *rgb, tp_error *err) {
    const long S = pp->img_size;
    const long scale = (long)floor((double)pp->img_size / pp->crop_pct);
    long new_w, new_h;
    if (pp->crop_mode == TP_CROP_SQUASH) {
        new_w = new_h = scale;
    } else if (w <= h) {
        /* Resize(int): the shorter side becomes `scale`; int(scale * long / short) in Python is a correctly
         * rounded true division then truncation, which the double division reproduces exactly (the product is
         * an integer far below 2^53). */
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
    const long y0 = top < 0 ? 0 : top, x0 = left < 0 ? 0 : left;           /* first resized row/col used */
    const long oy = top < 0 ? -top : 0, ox = left < 0 ? -left : 0;         /* where it lands in the crop */
    const long ch = (new_h < S ? new_h : S), cw = (new_w < S ? new_w : S); /* window size */

    unsigned char *win = rgb;
    if (ch != S || cw != S) { /* padded: resize into a window buffer, then place it */
        win = malloc((size_t)ch * (size_t)cw * 3);
        if (!win) return tp_fail(err, TP_ERR_OOM, "%s: out of host memory for a %ldx%ld crop", path, cw, ch);
    }
    tp_status st = resize_window(path, src, w, h, new_w, new_h, x0, y0, cw, ch, pp->interpolation,
                                 pp->pillow_version, win, err);
    if (win != rgb) {
        if (st == TP_OK) {
            memset(rgb, 0, (size_t)S * (size_t)S * 3);
            for (long y = 0; y < ch; y++)
                memcpy(rgb + ((size_t)(y + oy) * S + ox) * 3, win + (size_t)y * cw * 3, (size_t)cw * 3);
        }
        free(win);
    }
    return st;
}

/* ---- decoding ---------------------------------------------------------------------------------------- */

/* Decodes path to 8-bit RGB (h, w, 3) into *out, to be released with release_rgb8(*out, *by_stb). */
static tp_status decode_rgb8(const char *path, double max_pixels, unsigned char **out, int *w_out, int *h_out,
                             int *by_stb, tp_error *err) {
    *out = NULL;
    *by_stb = 0;
    /* Opening ourselves separates "missing/unreadable" (an I/O error naming errno) from "not an image". */
    FILE *f = tp_input_open(path, "the image", err);
    if (!f) return err ? err->code : TP_ERR_IO;
    int w = 0, h = 0, n = 0;
    unsigned char *px = NULL;
    const int known = stbi_info_from_file(f, &w, &h, &n);
    /* The header's size is checked before decoding: a 25-byte BMP declaring 32769 x 12608 pixels decoded (stb
     * fills what the file lacks) to 1.2 GB and took minutes to resize (fuzz_image, 2026-11-26) */
    if (known && (double)w * (double)h > max_pixels) {
        fclose(f);
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: %dx%d pixels, more than the %.0f tprof decodes; "
                       "downscale the image first", path, w, h, max_pixels);
    }
    if (known && n == 1 && stbi_is_16_bit_from_file(f)) {
        /* A 16-bit gray PNG is mode I;16 in PIL, whose conversion to RGB clips the value at 255; stb's 8-bit
         * load would keep the high byte instead. Gray with alpha and RGB(A) at 16 bits are read by PIL through
         * the high byte, as stb does. */
        unsigned short *g = stbi_load_from_file_16(f, &w, &h, &n, 1);
        if (g && w > 0 && h > 0) {
            px = malloc((size_t)w * (size_t)h * 3);
            if (px)
                for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
                    px[3 * i] = px[3 * i + 1] = px[3 * i + 2] = (unsigned char)(g[i] > 255 ? 255 : g[i]);
            stbi_image_free(g);
            if (!px) {
                fclose(f);
                return tp_fail(err, TP_ERR_OOM, "%s: out of host memory while decoding", path);
            }
        } else {
            stbi_image_free(g);
        }
    } else {
        px = stbi_load_from_file(f, &w, &h, &n, 3);
        if (px && (w < 1 || h < 1)) {
            stbi_image_free(px);
            px = NULL;
        }
        *by_stb = px != NULL;
    }
    fclose(f);
    if (!px) {
        const char *why = stbi_failure_reason();
        if (why && (!strcmp(why, "Out of memory") || !strcmp(why, "outofmem")))
            return tp_fail(err, TP_ERR_OOM, "%s: out of host memory while decoding", path);
        return tp_fail(err, TP_ERR_FORMAT, "%s: not a decodable PNG/JPEG/BMP image (%s)", path,
                       why ? why : "unknown reason");
    }
    *out = px;
    *w_out = w;
    *h_out = h;
    return TP_OK;
}

static void release_rgb8(unsigned char *px, int by_stb) {
    if (by_stb) stbi_image_free(px);
    else free(px);
}

tp_status tp_image_load_rgb8(const char *path, const tp_preprocess *pp, unsigned char *rgb, tp_error *err) {
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "image: no path given");
    if (!rgb) return tp_fail(err, TP_ERR_ARG, "image %s: no output buffer", path);
    tp_status st = check_preprocess(pp, err);
    if (st != TP_OK) return st;
    unsigned char *px = NULL;
    int w = 0, h = 0, by_stb = 0;
    const double max_px = pp->max_pixels > 0 ? pp->max_pixels : TP_IMAGE_MAX_PIXELS;
    if ((st = decode_rgb8(path, max_px, &px, &w, &h, &by_stb, err)) != TP_OK) return st;
    st = resize_crop(path, px, w, h, pp, rgb, err);
    release_rgb8(px, by_stb);
    return st;
}

tp_status tp_image_load(const char *path, const tp_preprocess *pp, float *dst, tp_error *err) {
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "image: no path given");
    if (!dst) return tp_fail(err, TP_ERR_ARG, "image %s: no output buffer", path);
    tp_status st = check_preprocess(pp, err);
    if (st != TP_OK) return st;
    const size_t S = (size_t)pp->img_size;
    unsigned char *rgb = malloc(S * S * 3);
    if (!rgb) return tp_fail(err, TP_ERR_OOM, "%s: out of host memory for a %zux%zu crop", path, S, S);
    if ((st = tp_image_load_rgb8(path, pp, rgb, err)) == TP_OK) {
        /* fp32 arithmetic in torchvision's order: ToTensor divides by 255, Normalize subtracts then divides.
         * Padding is 0 in rgb, as in torchvision's padded PIL image. */
        for (int c = 0; c < 3; c++) {
            const float mean = pp->mean[c], sd = pp->std[c];
            float *plane = dst + (size_t)c * S * S;
            for (size_t i = 0; i < S * S; i++) {
                float v = (float)rgb[3 * i + (size_t)c] / 255.0f;
                plane[i] = (v - mean) / sd;
            }
        }
    }
    free(rgb);
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
