/* test_image_stats.c: image preprocessing (src/io/image.c), timm's config.json reader (src/io/timm_config.c)
 * and benchmark/accuracy statistics (src/core/stats.c).
 *
 * Most images are written at run time with stb_image_write into a fresh mkdtemp folder per test (removed by the
 * fixture's teardown), so those tests cannot see each other's files, and their expected values are computed
 * here from the definitions (timm/torchvision eval transform, Pillow's resampling), never by calling the code
 * under test a second way. The exactness against Pillow itself is checked by test_pil_golden and
 * test_pil12_golden on the tests/fixtures/preprocess_* files that tools/check_preprocess_pil.py wrote with
 * Pillow 13 and Pillow 12. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/stats.h"
#include "io/image.h"
#include "io/timm_config.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
/* The library target gets the stb folder on its include path; a test target may only have the system
 * include dir, where the header lives under stb/. */
#if defined(__has_include)
#if __has_include(<stb_image_write.h>)
#include <stb_image.h>
#include <stb_image_write.h>
#else
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#endif
#else
#include <stb_image.h>
#include <stb_image_write.h>
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* ---- helpers ----------------------------------------------------------------------------------------- */

/* For per-pixel loops: Check's assertions record a mark point on every successful call (a message to the
 * parent process in fork mode), which costs seconds over a few hundred thousand pixels; this reaches Check
 * only on failure. */
#define REQUIRE(cond, ...)                       \
    do {                                         \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);  \
    } while (0)

static char g_root[64]; /* one per run, made and removed by the parent process (unchecked fixture) */
static char g_dir[128];  /* one per test, inside g_root */

/* Removes the test folder and whatever the test put there (one level of subfolders is enough here). */
static void rm_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && depth < 4) rm_tree(p, depth + 1);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* A failing test in fork mode exits without its checked teardown; the root's removal by the parent still
 * cleans up after it. */
static void setup_root(void) {
    strcpy(g_root, "/tmp/tprof_test_img_XXXXXX");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
}
static void teardown_root(void) { rm_tree(g_root, 0); }
static void setup_dir(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tXXXXXX", g_root);
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}
static void teardown_dir(void) { rm_tree(g_dir, 0); }

static const char *path_in(const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 256, "%s/%s", g_dir, name);
    return p;
}

typedef void (*pixel_fn)(int x, int y, unsigned char *px, int comp);

/* Writes a w x h image with comp channels; the format follows the extension (png, bmp, jpg). */
static const char *write_image(const char *name, int w, int h, int comp, pixel_fn fn) {
    unsigned char *buf = malloc((size_t)w * h * comp);
    ck_assert_ptr_nonnull(buf);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) fn(x, y, buf + ((size_t)y * w + x) * comp, comp);
    const char *p = path_in(name);
    const char *ext = strrchr(name, '.');
    int ok;
    if (!strcasecmp(ext, ".bmp")) ok = stbi_write_bmp(p, w, h, comp, buf);
    else if (!strcasecmp(ext, ".jpg") || !strcasecmp(ext, ".jpeg")) ok = stbi_write_jpg(p, w, h, comp, buf, 100);
    else ok = stbi_write_png(p, w, h, comp, buf, w * comp);
    free(buf);
    ck_assert_int_ne(ok, 0);
    return p;
}

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(path_in(name), "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* ImageNet constants, as timm's IMAGENET_DEFAULT_MEAN/STD (float32 on the torch side too). */
static tp_preprocess pp_imagenet(int img_size, double crop_pct) {
    tp_preprocess pp = {.img_size = img_size, .crop_pct = crop_pct, .mean = {0.485f, 0.456f, 0.406f},
                        .std = {0.229f, 0.224f, 0.225f}}; /* bicubic, center: the zero values */
    return pp;
}
static tp_preprocess pp_raw(int img_size, double crop_pct) { /* output = pixel / 255: easy to reason about */
    tp_preprocess pp = {.img_size = img_size, .crop_pct = crop_pct, .mean = {0.0f, 0.0f, 0.0f},
                        .std = {1.0f, 1.0f, 1.0f}};
    return pp;
}

/* torchvision's arithmetic: ToTensor in fp32, then Normalize in fp32. */
static float normalized(int v, const tp_preprocess *pp, int c) {
    float x = (float)v / 255.0f;
    return (x - pp->mean[c]) / pp->std[c];
}

/* Allocates a (B, 3, S, S) buffer plus a guard tail filled with a canary, to catch writes past the end. */
#define CANARY 12345.0f
#define GUARD 64
static float *alloc_batch(int B, int S) {
    size_t n = (size_t)B * 3 * S * S;
    float *p = malloc((n + GUARD) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n + GUARD; i++) p[i] = CANARY;
    return p;
}
static void check_guard(const float *p, int B, int S) {
    size_t n = (size_t)B * 3 * S * S;
    for (size_t i = 0; i < n; i++) REQUIRE(p[i] != CANARY, "element %zu of %zu never written", i, n);
    for (size_t i = n; i < n + GUARD; i++) REQUIRE(p[i] == CANARY, "write past the end at %zu", i);
}

static void px_gradient(int x, int y, unsigned char *px, int comp) {
    for (int c = 0; c < comp; c++) px[c] = (unsigned char)((x * 255 / 299 + y * (c + 1)) & 255);
}
static void px_const(int x, int y, unsigned char *px, int comp) {
    (void)x, (void)y;
    static const unsigned char rgb[3] = {200, 100, 30};
    for (int c = 0; c < comp; c++) px[c] = rgb[c % 3];
}
static void px_const10(int x, int y, unsigned char *px, int comp) {
    (void)x, (void)y;
    for (int c = 0; c < comp; c++) px[c] = 10;
}
static void px_const200(int x, int y, unsigned char *px, int comp) {
    (void)x, (void)y;
    for (int c = 0; c < comp; c++) px[c] = 200;
}
/* Thirds of a 192-wide image: 0 | 128 | 255. */
static void px_thirds(int x, int y, unsigned char *px, int comp) {
    (void)y;
    unsigned char v = x < 64 ? 0 : (x < 128 ? 128 : 255);
    for (int c = 0; c < comp; c++) px[c] = v;
}
/* Encodes the column (channel 0) and row (channel 1), to locate the crop without resampling. */
static void px_coords(int x, int y, unsigned char *px, int comp) {
    px[0] = (unsigned char)(x * 7);
    if (comp > 1) px[1] = (unsigned char)(y * 7);
    if (comp > 2) px[2] = 50;
}
static void px_gray_gradient(int x, int y, unsigned char *px, int comp) {
    for (int c = 0; c < comp; c++) px[c] = (unsigned char)((x * 3 + y * 5) & 255);
}

/* ---- image: sizes and values ------------------------------------------------------------------------- */

START_TEST(test_gradient_size_and_range) {
    const char *p = write_image("grad.png", 300, 200, 3, px_gradient);
    tp_preprocess pp = pp_imagenet(224, 0.9); /* scale 248: 200 -> 248, 300 -> int(248*300/200) = 372 */
    float *out = alloc_batch(1, 224);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    check_guard(out, 1, 224);
    for (int c = 0; c < 3; c++) {
        float lo = normalized(0, &pp, c), hi = normalized(255, &pp, c);
        for (int i = 0; i < 224 * 224; i++) {
            float v = out[c * 224 * 224 + i];
            REQUIRE(isfinite(v) && v >= lo - 1e-6f && v <= hi + 1e-6f, "channel %d elem %d = %g", c, i,
                          (double)v);
        }
    }
    free(out);
}
END_TEST

/* Resampling a constant is exact (weights sum to 1, result rounded back to 8 bits), so every output is the
 * normalized constant, whatever the scale: downsampling, upsampling, 1x1 input, and extreme aspect ratios. */
static void check_constant(const char *name, int w, int h, int img, double crop) {
    const char *p = write_image(name, w, h, 3, px_const);
    tp_preprocess pp = pp_imagenet(img, crop);
    float *out = alloc_batch(1, img);
    tp_error err = {0};
    ck_assert_msg(tp_image_load(p, &pp, out, &err) == TP_OK, "%s: %s", name, err.msg);
    check_guard(out, 1, img);
    static const int rgb[3] = {200, 100, 30};
    for (int c = 0; c < 3; c++) {
        float want = normalized(rgb[c], &pp, c);
        for (int i = 0; i < img * img; i++)
            REQUIRE(fabsf(out[c * img * img + i] - want) <= 1e-5f, "%s %dx%d: channel %d elem %d = %.7g, want %.7g",
                          name, w, h, c, i, (double)out[c * img * img + i], (double)want);
    }
    free(out);
}

START_TEST(test_constant_image_exact) {
    check_constant("c1.png", 300, 200, 224, 0.9);   /* upsample */
    check_constant("c2.png", 1000, 700, 224, 0.875); /* downsample */
    check_constant("c3.bmp", 200, 300, 384, 1.0);   /* portrait, BMP */
    check_constant("c4.png", 1, 1, 32, 0.9);        /* a single pixel */
    check_constant("c5.png", 3000, 1, 16, 1.0);     /* 1-pixel strip: the crop window, not 48000 x 16 */
    check_constant("c6.png", 248, 248, 224, 0.9);   /* already at scale size: no resampling at all */
}
END_TEST

/* crop_pct > 1: the resized image (186 px) is smaller than the crop (224); torchvision zero-pads (before
 * Normalize), left/top padding (224 - 186) // 2 = 19, right/bottom 19. */
START_TEST(test_crop_pct_above_one_pads) {
    const char *p = write_image("small.png", 100, 100, 3, px_const);
    tp_preprocess pp = pp_imagenet(224, 1.2); /* floor(224 / 1.2) = 186 */
    float *out = alloc_batch(1, 224);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    check_guard(out, 1, 224);
    static const int rgb[3] = {200, 100, 30};
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 224; y++)
            for (int x = 0; x < 224; x++) {
                int inside = y >= 19 && y < 19 + 186 && x >= 19 && x < 19 + 186;
                float want = normalized(inside ? rgb[c] : 0, &pp, c);
                REQUIRE(fabsf(out[(c * 224 + y) * 224 + x] - want) <= 1e-5f, "c %d y %d x %d", c, y, x);
            }
    free(out);
}
END_TEST

/* 192x64 with thirds 0 | 128 | 255, img 32, crop_pct 1: resized to 96x32 (exact 2x downsample), crop left
 * (96 - 32) / 2 = 32, i.e. original columns 64..127: the middle third. PIL's bicubic support at 2x is 4
 * input pixels each side of the output pixel's centre, so only the outermost crop columns can see the
 * neighbours, and the 22-bit fixed-point weights of the others sum to 1 closely enough to give 128 exactly. */
START_TEST(test_center_crop_picks_center) {
    const char *p = write_image("thirds.png", 192, 64, 3, px_thirds);
    tp_preprocess pp = pp_raw(32, 1.0);
    float *out = alloc_batch(1, 32);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    check_guard(out, 1, 32);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 2; x < 30; x++)
                REQUIRE(out[(c * 32 + y) * 32 + x] == 128.0f / 255.0f, "c %d y %d x %d = %g", c, y, x,
                              (double)out[(c * 32 + y) * 32 + x]);
    /* and a left-shifted crop would have seen black, a right-shifted one white: */
    for (int y = 0; y < 32; y++) {
        ck_assert_float_gt(out[y * 32 + 0], 0.3f);
        ck_assert_float_lt(out[y * 32 + 31], 0.7f);
    }
    free(out);
}
END_TEST

/* Crop offsets use Python's round (ties to even) on (size - crop) / 2: d = 3 -> 2, d = 1 -> 0, d = 5 -> 2.
 * With crop_pct 1 and the short side already equal to img_size there is no resampling, so the encoded
 * column/row index identifies the crop offset exactly. */
static void check_offset(int w, int h, int want_left, int want_top) {
    char name[32];
    snprintf(name, sizeof name, "coords_%dx%d.png", w, h);
    const char *p = write_image(name, w, h, 3, px_coords);
    tp_preprocess pp = pp_raw(32, 1.0);
    float *out = alloc_batch(1, 32);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) {
            REQUIRE(out[(0 * 32 + y) * 32 + x] == (float)((x + want_left) * 7 & 255) / 255.0f,
                    "%dx%d: y %d x %d: channel 0 = %g, want column %d", w, h, y, x,
                    (double)out[(0 * 32 + y) * 32 + x] * 255 / 7, x + want_left);
            REQUIRE(out[(1 * 32 + y) * 32 + x] == (float)((y + want_top) * 7 & 255) / 255.0f,
                    "%dx%d: y %d x %d: channel 1 = %g, want row %d", w, h, y, x,
                    (double)out[(1 * 32 + y) * 32 + x] * 255 / 7, y + want_top);
            REQUIRE(out[(2 * 32 + y) * 32 + x] == 50.0f / 255.0f, "%dx%d: y %d x %d: channel 2", w, h, y, x);
        }
    free(out);
}

START_TEST(test_crop_offset_rounding) {
    check_offset(35, 32, 2, 0); /* round(1.5) = 2 */
    check_offset(33, 32, 0, 0); /* round(0.5) = 0 */
    check_offset(37, 32, 2, 0); /* round(2.5) = 2 */
    check_offset(32, 35, 0, 2);
    check_offset(32, 36, 0, 2);
}
END_TEST

/* Resize(int) keeps the aspect ratio and truncates the long side: 47 x 33 with scale 32 gives
 * int(32 * 47 / 33) = int(45.58) = 45 (rounding would give 46). With crop_pct 2 (img 64, scale 32) the resized
 * image is smaller than the crop, so its exact size shows as the zero padding around it: left pad
 * (64 - 45) // 2 = 9, columns 9..53 are image, top pad (64 - 32) // 2 = 16, rows 16..47. */
START_TEST(test_resize_truncates_long_side) {
    const char *p = write_image("trunc.png", 47, 33, 3, px_const10);
    tp_preprocess pp = pp_raw(64, 2.0);
    float *out = alloc_batch(1, 64);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    check_guard(out, 1, 64);
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 64; x++) {
            int inside = x >= 9 && x <= 53 && y >= 16 && y <= 47;
            REQUIRE(out[y * 64 + x] == (inside ? 10.0f / 255.0f : 0.0f), "y %d x %d = %g", y, x,
                          (double)out[y * 64 + x]);
        }
    free(out);
}
END_TEST

START_TEST(test_grayscale_replicated) {
    const char *p = write_image("gray.png", 120, 90, 1, px_gray_gradient);
    tp_preprocess pp = pp_raw(64, 0.875);
    float *out = alloc_batch(1, 64);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    check_guard(out, 1, 64);
    int varied = 0;
    for (int i = 0; i < 64 * 64; i++) {
        REQUIRE(out[i] == out[64 * 64 + i] && out[i] == out[2 * 64 * 64 + i], "pixel %d: %g %g %g", i,
                (double)out[i], (double)out[64 * 64 + i], (double)out[2 * 64 * 64 + i]);
        varied += out[i] != out[0];
    }
    ck_assert_int_gt(varied, 0); /* really an image, not a constant */
    free(out);
}
END_TEST

START_TEST(test_rgba_alpha_dropped) {
    /* PIL convert("RGB") drops alpha without compositing: a transparent pixel keeps its color. */
    const char *p = path_in("rgba.png");
    unsigned char px[4 * 4 * 4];
    for (int i = 0; i < 16; i++) px[4 * i] = 40, px[4 * i + 1] = 80, px[4 * i + 2] = 120, px[4 * i + 3] = 0;
    ck_assert_int_ne(stbi_write_png(p, 4, 4, 4, px, 16), 0);
    tp_preprocess pp = pp_raw(4, 1.0);
    float out[3 * 16];
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    for (int i = 0; i < 16; i++) {
        ck_assert_float_eq(out[i], 40.0f / 255.0f);
        ck_assert_float_eq(out[16 + i], 80.0f / 255.0f);
        ck_assert_float_eq(out[32 + i], 120.0f / 255.0f);
    }
}
END_TEST

START_TEST(test_jpeg_decodes) {
    const char *p = write_image("const.jpg", 64, 48, 3, px_const);
    tp_preprocess pp = pp_raw(32, 0.875);
    float *out = alloc_batch(1, 32);
    tp_error err = {0};
    ck_assert_msg(tp_image_load(p, &pp, out, &err) == TP_OK, "%s", err.msg);
    check_guard(out, 1, 32);
    static const int rgb[3] = {200, 100, 30};
    for (int c = 0; c < 3; c++) /* JPEG is lossy (YCbCr, quantization): a few levels */
        for (int i = 0; i < 32 * 32; i++)
            REQUIRE(fabsf(out[c * 1024 + i] - rgb[c] / 255.0f) < 4.0f / 255.0f, "channel %d elem %d = %g", c, i,
                    (double)out[c * 1024 + i] * 255);
    free(out);
}
END_TEST

/* ---- batches and folders ----------------------------------------------------------------------------- */

START_TEST(test_folder_cycles) {
    write_image("img0.png", 40, 30, 3, px_const10);
    write_image("img1.BMP", 30, 40, 3, px_const200); /* extension match is case-insensitive */
    write_text("notes.txt", "not an image");
    write_text(".hidden.png", "skipped: hidden");
    ck_assert_int_eq(mkdir(path_in("dir.png"), 0700), 0); /* a folder with an image name is not a file */
    tp_preprocess pp = pp_imagenet(16, 0.875);
    float *out = alloc_batch(3, 16);
    int n_files = -1;
    tp_error err = {0};
    ck_assert_msg(tp_image_load_batch(g_dir, &pp, 3, out, &n_files, &err) == TP_OK, "%s", err.msg);
    check_guard(out, 3, 16);
    ck_assert_int_eq(n_files, 2);
    static const int want[3] = {10, 200, 10};
    for (int b = 0; b < 3; b++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 256; i++)
                REQUIRE(fabsf(out[(b * 3 + c) * 256 + i] - normalized(want[b], &pp, c)) <= 1e-5f,
                              "batch %d channel %d elem %d", b, c, i);
    free(out);
}
END_TEST

START_TEST(test_folder_more_files_than_batch) {
    write_image("b.png", 8, 8, 3, px_const200);
    write_image("a.png", 8, 8, 3, px_const10); /* sorted by name: a before b */
    write_image("c.png", 8, 8, 3, px_const200);
    tp_preprocess pp = pp_raw(8, 1.0);
    float *out = alloc_batch(1, 8);
    int n_files = -1;
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load_batch(g_dir, &pp, 1, out, &n_files, &err), TP_OK);
    check_guard(out, 1, 8);
    ck_assert_int_eq(n_files, 1);
    ck_assert_float_eq(out[0], 10.0f / 255.0f);
    free(out);
}
END_TEST

START_TEST(test_single_file_repeated) {
    const char *p = write_image("g.png", 50, 40, 3, px_gradient);
    tp_preprocess pp = pp_imagenet(24, 0.9);
    float *out = alloc_batch(4, 24);
    int n_files = -1;
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load_batch(p, &pp, 4, out, &n_files, &err), TP_OK);
    check_guard(out, 4, 24);
    ck_assert_int_eq(n_files, 1);
    size_t per = 3 * 24 * 24;
    for (int b = 1; b < 4; b++) ck_assert_int_eq(memcmp(out, out + b * per, per * sizeof(float)), 0);
    free(out);
}
END_TEST

/* ---- errors: one line naming the path, never a crash ------------------------------------------------- */

START_TEST(test_missing_file) {
    const char *p = path_in("does_not_exist.png");
    tp_preprocess pp = pp_imagenet(16, 0.9);
    float out[3 * 16 * 16];
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_IO);
    ck_assert_int_eq(err.code, TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    tp_error err2 = {0};
    int n = -1;
    ck_assert_int_eq(tp_image_load_batch(p, &pp, 1, out, &n, &err2), TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err2.msg, p));
    ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(test_text_file_named_png) {
    write_text("x.png", "this is not a PNG file at all\n");
    const char *p = path_in("x.png");
    tp_preprocess pp = pp_imagenet(16, 0.9);
    float out[3 * 16 * 16];
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    /* the same file inside a folder fails the batch with the file's name */
    tp_error err2 = {0};
    ck_assert_int_eq(tp_image_load_batch(g_dir, &pp, 1, out, NULL, &err2), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err2.msg, "x.png"));
}
END_TEST

START_TEST(test_truncated_png) {
    const char *p = write_image("t.png", 64, 64, 3, px_gradient);
    ck_assert_int_eq(truncate(p, 60), 0); /* header survives, data does not */
    tp_preprocess pp = pp_imagenet(16, 0.9);
    float out[3 * 16 * 16];
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    write_text("empty.png", "");
    ck_assert_int_eq(tp_image_load(path_in("empty.png"), &pp, out, &err), TP_ERR_FORMAT);
}
END_TEST

/* fuzz_image's input (2026-11-26): a 25-byte BMP whose core header declares 32769 x 12608 pixels; stb decoded it,
 * filling what the file lacks, to 1.2 GB. Refused from the header now, with the size, before any decoding. */
START_TEST(test_huge_declared_size) {
    static const unsigned char bmp[25] = {0x42, 0x4d, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x95, 0xfe, 0x00, 0x03, 0x00,
                                          0x00, 0x0c, 0x00, 0x00, 0x00, 0x01, 0x80, 0x40, 0x31, 0x01, 0x00, 0x01};
    const char *p = path_in("huge.bmp");
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bmp, 1, sizeof bmp, f), sizeof bmp);
    fclose(f);
    tp_preprocess pp = pp_imagenet(16, 0.9);
    float out[3 * 16 * 16];
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, p) && strstr(err.msg, "32769x12608 pixels, more than the 134217728"), "%s", err.msg);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    /* a smaller bound of the caller's: a 64 x 64 PNG refused at 4000 pixels, read at 4096 */
    const char *q = write_image("b.png", 64, 64, 3, px_gradient);
    pp.max_pixels = 4000;
    ck_assert_int_eq(tp_image_load(q, &pp, out, &err), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "64x64 pixels, more than the 4000"), "%s", err.msg);
    pp.max_pixels = 4096;
    ck_assert_int_eq(tp_image_load(q, &pp, out, &err), TP_OK);
}
END_TEST

START_TEST(test_empty_folder) {
    tp_preprocess pp = pp_imagenet(16, 0.9);
    float out[3 * 16 * 16];
    tp_error err = {0};
    int n = -1;
    tp_status st = tp_image_load_batch(g_dir, &pp, 2, out, &n, &err);
    ck_assert_int_eq(st, TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, g_dir));
    ck_assert_int_eq(n, 0);
    write_text("readme.txt", "no images here");
    ck_assert_int_eq(tp_image_load_batch(g_dir, &pp, 2, out, &n, &err), TP_ERR_IO);
}
END_TEST

START_TEST(test_bad_arguments) {
    const char *p = write_image("ok.png", 8, 8, 3, px_const);
    float out[3 * 8 * 8 * 2];
    tp_error err = {0};
    tp_preprocess pp = pp_imagenet(8, 0.9);
    ck_assert_int_eq(tp_image_load_batch(p, &pp, 0, out, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_image_load(p, &pp, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_image_load(p, NULL, out, &err), TP_ERR_ARG);
    pp.crop_pct = 0.0;
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_ARG);
    pp.crop_pct = NAN;
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_ARG);
    pp = pp_imagenet(0, 0.9);
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_ARG);
    pp = pp_imagenet(8, 0.9);
    pp.std[1] = 0.0f;
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_ARG);
    pp = pp_imagenet(8, 0.9);
    ck_assert_int_eq(tp_image_load(g_dir, &pp, out, &err), TP_ERR_IO); /* a folder is not a file */
    ck_assert_int_eq(tp_image_load(p, &pp, out, NULL), TP_OK);         /* err is optional */
}
END_TEST

/* ---- resampling, filters and crop modes ------------------------------------------------------------ */

START_TEST(test_interp_crop_names) {
    static const char *const interps[] = {"bicubic", "bilinear", "nearest"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tp_interp_parse(interps[i]), i);
        ck_assert_str_eq(tp_interp_name((tp_interp)i), interps[i]);
    }
    ck_assert_int_eq(TP_INTERP_BICUBIC, 0); /* a zero-initialised tp_preprocess is bicubic */
    ck_assert_int_eq(TP_CROP_CENTER, 0);    /* ... and center */
    ck_assert_int_eq(tp_interp_parse("lanczos"), -1);
    ck_assert_int_eq(tp_interp_parse("Bicubic"), -1); /* timm's strings are lower case */
    ck_assert_int_eq(tp_interp_parse(""), -1);
    ck_assert_int_eq(tp_interp_parse(NULL), -1);
    ck_assert_str_eq(tp_interp_name((tp_interp)7), "?");
    ck_assert_int_eq(tp_crop_mode_parse("center"), TP_CROP_CENTER);
    ck_assert_int_eq(tp_crop_mode_parse("squash"), TP_CROP_SQUASH);
    ck_assert_str_eq(tp_crop_mode_name(TP_CROP_CENTER), "center");
    ck_assert_str_eq(tp_crop_mode_name(TP_CROP_SQUASH), "squash");
    ck_assert_int_eq(tp_crop_mode_parse("border"), -1);
    ck_assert_int_eq(tp_crop_mode_parse(NULL), -1);
    ck_assert_str_eq(tp_crop_mode_name((tp_crop_mode)-1), "?");
}
END_TEST

START_TEST(test_enum_out_of_range) {
    const char *p = write_image("ok.png", 8, 8, 3, px_const);
    float out[3 * 8 * 8];
    tp_error err = {0};
    tp_preprocess pp = pp_imagenet(8, 0.9);
    pp.interpolation = (tp_interp)7;
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "interpolation 7") != NULL, "%s", err.msg);
    pp = pp_imagenet(8, 0.9);
    pp.crop_mode = (tp_crop_mode)5;
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "crop_mode 5") != NULL, "%s", err.msg);
    unsigned char rgb[8 * 8 * 3];
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, rgb, &err), TP_ERR_ARG);
    pp = pp_imagenet(8, 0.9);
    pp.pillow_version = -1;
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, rgb, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "pillow_version -1") != NULL, "%s", err.msg);
    pp = pp_imagenet(8, 0.9);
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, rgb, &err), TP_OK);
}
END_TEST

/* One row [0, 255] (2 x 4 image), img 4, crop_pct 1: the short side 2 becomes 4, so the row is upsampled 2x
 * (and the constant columns 4 -> 8 rows, exactly). Pillow's weights, by hand: output pixel j has centre
 * c = (j + 0.5) / 2 and taps [int(c - support + 0.5), int(c + support + 0.5)) clipped to [0, 2), each weighted
 * filter(tap - c + 0.5), then normalized.
 *   bilinear: j = 0: c 0.25, taps {0}: 0. j = 1: c 0.75, taps {0, 1} weights 0.75, 0.25: 63.75 -> 64 (fixed
 *     point: (255 * 2^20 + 2^21) >> 22). j = 2: weights 0.25, 0.75: 191.25 -> 191. j = 3: taps {1}: 255.
 *   bicubic (a = -0.5): j = 1: taps {0, 1} (the taps at -1 and 2 fall outside and are dropped, not clamped to
 *     the edge), weights k(0.25) = 0.8671875 and k(0.75) = 0.2265625, normalized: 255 * 0.2265625 / 1.09375 =
 *     52.8 -> 53. j = 0: k(0.25) and k(1.25) = -0.0703125: 255 * -0.0703125 / 0.796875 < 0, clamped to 0.
 *     By symmetry j = 2, 3: 202, 255. (An edge-clamping resampler gives other values at j = 1, 2.) */
START_TEST(test_border_weights_by_hand) {
    const char *p = path_in("pair.png");
    unsigned char px[2 * 4 * 3];
    for (int y = 0; y < 4; y++)
        for (int c = 0; c < 3; c++) px[(y * 2 + 0) * 3 + c] = 0, px[(y * 2 + 1) * 3 + c] = 255;
    ck_assert_int_ne(stbi_write_png(p, 2, 4, 3, px, 6), 0);
    static const int want[2][4] = {{0, 53, 202, 255}, {0, 64, 191, 255}};
    for (int f = 0; f < 2; f++) {
        tp_preprocess pp = pp_raw(4, 1.0);
        pp.interpolation = f == 0 ? TP_INTERP_BICUBIC : TP_INTERP_BILINEAR;
        unsigned char rgb[4 * 4 * 3];
        memset(rgb, 0xA5, sizeof rgb);
        tp_error err = {0};
        ck_assert_int_eq(tp_image_load_rgb8(p, &pp, rgb, &err), TP_OK);
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++)
                for (int c = 0; c < 3; c++)
                    ck_assert_msg(rgb[(y * 4 + x) * 3 + c] == want[f][x], "%s: y %d x %d c %d = %d, want %d",
                                  tp_interp_name(pp.interpolation), y, x, c, rgb[(y * 4 + x) * 3 + c], want[f][x]);
    }
}
END_TEST

/* Nearest and squash, from the definitions. px_coords encodes column * 7 in channel 0, row * 7 in channel 1.
 *   64 x 32, img 32, crop_pct 1, squash: both sides to 32; Pillow's nearest takes source column
 *     int((x + 0.5) * 64 / 32) = 2x + 1 and row int((y + 0.5) * 1) = y.
 *   the same in center mode: short side 32 already, long side 64: no resampling, crop offset 16.
 *   10 x 7, img 20, crop_pct 1, nearest, center: 28 x 20 (int(20 * 10 / 7)), crop columns from
 *     round((28 - 20) / 2) = 4; source column int((x + 4 + 0.5) * 10 / 28), row int((y + 0.5) * 7 / 20) (no
 *     sum lands within rounding distance of an integer, so Pillow's accumulation gives the same indices). */
START_TEST(test_nearest_and_squash) {
    const char *p = write_image("coords64.png", 64, 32, 3, px_coords);
    tp_preprocess pp = pp_raw(32, 1.0);
    pp.interpolation = TP_INTERP_NEAREST;
    pp.crop_mode = TP_CROP_SQUASH;
    unsigned char rgb[32 * 32 * 3];
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, rgb, &err), TP_OK);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) {
            REQUIRE(rgb[(y * 32 + x) * 3 + 0] == (unsigned char)((2 * x + 1) * 7), "squash: y %d x %d col %d", y, x,
                    rgb[(y * 32 + x) * 3] / 7);
            REQUIRE(rgb[(y * 32 + x) * 3 + 1] == (unsigned char)(y * 7), "squash: y %d x %d row", y, x);
        }
    pp.crop_mode = TP_CROP_CENTER;
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, rgb, &err), TP_OK);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++)
            REQUIRE(rgb[(y * 32 + x) * 3 + 0] == (unsigned char)((x + 16) * 7), "center: y %d x %d", y, x);

    p = write_image("coords10.png", 10, 7, 3, px_coords);
    pp = pp_raw(20, 1.0);
    pp.interpolation = TP_INTERP_NEAREST;
    unsigned char up[20 * 20 * 3];
    ck_assert_int_eq(tp_image_load_rgb8(p, &pp, up, &err), TP_OK);
    for (int y = 0; y < 20; y++)
        for (int x = 0; x < 20; x++) {
            int sx = (int)((x + 4 + 0.5) * 10.0 / 28.0), sy = (int)((y + 0.5) * 7.0 / 20.0);
            REQUIRE(up[(y * 20 + x) * 3 + 0] == (unsigned char)(sx * 7) &&
                        up[(y * 20 + x) * 3 + 1] == (unsigned char)(sy * 7),
                    "upsampled: y %d x %d: got col %d row %d, want %d %d", y, x, up[(y * 20 + x) * 3] / 7,
                    up[(y * 20 + x) * 3 + 1] / 7, sx, sy);
        }
}
END_TEST

/* Squash with crop_pct > 1: both sides to floor(24 / 1.15) = 20, zero-padded by 2 on each side. A constant
 * image stays constant through any resampling (the weights sum to 1). */
START_TEST(test_squash_pads) {
    const char *p = write_image("squash.png", 50, 20, 3, px_const);
    tp_preprocess pp = pp_raw(24, 1.15);
    pp.crop_mode = TP_CROP_SQUASH;
    pp.interpolation = TP_INTERP_BILINEAR;
    float *out = alloc_batch(1, 24);
    tp_error err = {0};
    ck_assert_int_eq(tp_image_load(p, &pp, out, &err), TP_OK);
    check_guard(out, 1, 24);
    static const int rgb[3] = {200, 100, 30};
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 24; y++)
            for (int x = 0; x < 24; x++) {
                int inside = y >= 2 && y < 22 && x >= 2 && x < 22;
                REQUIRE(out[(c * 24 + y) * 24 + x] == (inside ? rgb[c] / 255.0f : 0.0f), "c %d y %d x %d = %g", c,
                        y, x, (double)out[(c * 24 + y) * 24 + x]);
            }
    free(out);
}
END_TEST

/* ---- exactness against Pillow: the golden fixtures ---------------------------------------------------- */

static const char *fixture(const char *name) {
    static char buf[2][256];
    static int k;
    char *p = buf[k++ & 1];
    snprintf(p, 256, "tests/fixtures/%s", name);
    return p;
}

typedef struct {
    int cases, vfirst, nearest, bilinear, squash, normalized_files, order_matters;
} golden_counts;

/* Runs every case of one manifest (tests/fixtures/preprocess_cases*.txt, written by
 * tools/check_preprocess_pil.py): the source PNG through tp_image_load_rgb8, with the manifest's Pillow major
 * version as pillow_version, must give the expected crop (written by that Pillow) byte for byte, and
 * tp_image_load its normalization: within 1e-6 of the crop normalized here, and equal to the fp32 values numpy
 * computed where the case has them. Cases from an older Pillow also count where the newest Pillow's pass
 * order gives another result (order_matters), so that the fixture is known to tell the two apart. */
static void run_golden(const char *manifest, int want_pillow_min, int want_pillow_max, golden_counts *k) {
    FILE *f = fopen(fixture(manifest), "r");
    ck_assert_msg(f != NULL, "cannot open %s (run from the repository root)", fixture(manifest));
    char line[1024];
    memset(k, 0, sizeof *k);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char src[128], interp[32], mode[32], exp[128], nrm[128], order[16];
        int S, pil;
        double crop;
        ck_assert_int_eq(sscanf(line, "%127s %d %lf %31s %31s %127s %127s %15s %d", src, &S, &crop, interp, mode,
                                exp, nrm, order, &pil),
                         9);
        ck_assert(S >= 1 && S <= 64);
        ck_assert_msg(pil >= want_pillow_min && pil <= want_pillow_max, "%s: a case written by Pillow %d", manifest,
                      pil);
        tp_preprocess pp = pp_imagenet(S, crop);
        int ii = tp_interp_parse(interp), cm = tp_crop_mode_parse(mode);
        ck_assert_msg(ii >= 0 && cm >= 0, "case %d: %s %s", k->cases, interp, mode);
        pp.interpolation = (tp_interp)ii;
        pp.crop_mode = (tp_crop_mode)cm;
        pp.pillow_version = pil;
        k->vfirst += !strcmp(order, "vfirst");
        k->nearest += pp.interpolation == TP_INTERP_NEAREST;
        k->bilinear += pp.interpolation == TP_INTERP_BILINEAR;
        k->squash += pp.crop_mode == TP_CROP_SQUASH;

        int ew = 0, eh = 0, en = 0;
        unsigned char *want = stbi_load(fixture(exp), &ew, &eh, &en, 3);
        ck_assert_msg(want != NULL, "cannot decode %s", fixture(exp));
        ck_assert_msg(ew == S && eh == S, "%s is %dx%d, not %dx%d", exp, ew, eh, S, S);

        const size_t n = (size_t)S * S * 3;
        unsigned char *got = malloc(n);
        ck_assert_ptr_nonnull(got);
        memset(got, 0xA5, n); /* poison: every byte must be written */
        tp_error err = {0};
        ck_assert_msg(tp_image_load_rgb8(fixture(src), &pp, got, &err) == TP_OK, "%s", err.msg);
        size_t ndiff = 0, first = n;
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i]) {
                if (!ndiff) first = i;
                ndiff++;
            }
        REQUIRE(ndiff == 0, "%s case %d (%s S %d crop %g %s %s, %s, Pillow %d): %zu of %zu values differ from "
                "Pillow's, the first at y %zu x %zu c %zu: %d, want %d", manifest, k->cases, src, S, crop, interp,
                mode, order, pil, ndiff, n, first / 3 / S, first / 3 % S, first % 3, got[first], want[first]);
        if (pil != 0 && pil <= 12) { /* the newest Pillow's order on the same case */
            tp_preprocess pn = pp;
            pn.pillow_version = 0;
            ck_assert_int_eq(tp_image_load_rgb8(fixture(src), &pn, got, &err), TP_OK);
            k->order_matters += memcmp(got, want, n) != 0;
        }

        float *x = alloc_batch(1, S);
        ck_assert_msg(tp_image_load(fixture(src), &pp, x, &err) == TP_OK, "%s", err.msg);
        check_guard(x, 1, S);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < S * S; i++)
                REQUIRE(fabsf(x[c * S * S + i] - normalized(want[i * 3 + c], &pp, c)) <= 1e-6f,
                        "case %d: normalized c %d elem %d = %.9g, want %.9g", k->cases, c, i,
                        (double)x[c * S * S + i], (double)normalized(want[i * 3 + c], &pp, c));
        if (strcmp(nrm, "-")) {
            FILE *g = fopen(fixture(nrm), "rb");
            ck_assert_msg(g != NULL, "cannot open %s", fixture(nrm));
            float *ref = malloc(n * sizeof *ref);
            ck_assert_ptr_nonnull(ref);
            ck_assert_msg(fread(ref, sizeof *ref, n, g) == n && fgetc(g) == EOF, "%s: not %zu floats", nrm, n);
            fclose(g);
            for (size_t i = 0; i < n; i++)
                REQUIRE(x[i] == ref[i], "case %d: element %zu = %.9g, numpy's %.9g (torch's fp32 division, not a "
                        "product by 1/std, is exact, so equal is the target)", k->cases, i, (double)x[i],
                        (double)ref[i]);
            free(ref);
            k->normalized_files++;
        }
        free(x);
        free(got);
        stbi_image_free(want);
        k->cases++;
    }
    fclose(f);
}

START_TEST(test_pil_golden) {
    golden_counts k;
    run_golden("preprocess_cases.txt", 13, 13, &k); /* written by Pillow 13: regenerate with 13 */
    /* a truncated or emptied manifest must not pass */
    ck_assert_int_ge(k.cases, 19);
    ck_assert_int_ge(k.vfirst, 3);
    ck_assert_int_ge(k.nearest, 2);
    ck_assert_int_ge(k.bilinear, 4);
    ck_assert_int_ge(k.squash, 3);
    ck_assert_int_ge(k.normalized_files, 2);
}
END_TEST

/* The same on the cases written by Pillow 12, whose pass order is horizontal first throughout. */
START_TEST(test_pil12_golden) {
    golden_counts k;
    run_golden("preprocess_cases_pil12.txt", 1, 12, &k);
    ck_assert_int_ge(k.cases, 4);
    ck_assert_int_ge(k.order_matters, 3); /* those cases differ with Pillow 13's order: the knob is tested */
}
END_TEST

/* ---- timm config.json --------------------------------------------------------------------------------- */

static tp_status read_cfg(const char *json, tp_timm_config *cfg, tp_error *err) {
    write_text("config.json", json);
    return tp_timm_config_read(path_in("config.json"), cfg, err);
}

/* timm/vit_base_patch16_224.augreg2_in21k_ft_in1k's config.json as the hub serves it. */
START_TEST(test_timm_config_hub_file) {
    tp_timm_config cfg;
    memset(&cfg, 0x5A, sizeof cfg);
    tp_error err = {0};
    ck_assert_msg(read_cfg("{\n"
                           "    \"architecture\": \"vit_base_patch16_224\",\n"
                           "    \"num_classes\": 1000,\n"
                           "    \"num_features\": 768,\n"
                           "    \"global_pool\": \"token\",\n"
                           "    \"pretrained_cfg\": {\n"
                           "        \"tag\": \"augreg2_in21k_ft_in1k\",\n"
                           "        \"custom_load\": false,\n"
                           "        \"input_size\": [3, 224, 224],\n"
                           "        \"fixed_input_size\": true,\n"
                           "        \"interpolation\": \"bicubic\",\n"
                           "        \"crop_pct\": 0.9,\n"
                           "        \"crop_mode\": \"center\",\n"
                           "        \"mean\": [0.5, 0.5, 0.5],\n"
                           "        \"std\": [0.5, 0.5, 0.5],\n"
                           "        \"num_classes\": 1000,\n"
                           "        \"pool_size\": null,\n"
                           "        \"first_conv\": \"patch_embed.proj\",\n"
                           "        \"classifier\": \"head\"\n"
                           "    }\n"
                           "}\n",
                           &cfg, &err) == TP_OK,
                  "%s", err.msg);
    ck_assert_str_eq(cfg.architecture, "vit_base_patch16_224");
    ck_assert_str_eq(cfg.tag, "augreg2_in21k_ft_in1k");
    ck_assert_int_eq(cfg.num_classes, 1000);
    ck_assert_int_eq(cfg.num_features, 768);
    ck_assert_int_eq(cfg.global_pool, TP_TIMM_POOL_TOKEN);
    ck_assert_int_eq(cfg.has_pre, 1);
    ck_assert_int_eq(cfg.pre.img_size, 224);
    ck_assert_double_eq(cfg.pre.crop_pct, 0.9);
    ck_assert_int_eq(cfg.pre.interpolation, TP_INTERP_BICUBIC);
    ck_assert_int_eq(cfg.pre.crop_mode, TP_CROP_CENTER);
    for (int c = 0; c < 3; c++) {
        ck_assert_float_eq(cfg.pre.mean[c], 0.5f);
        ck_assert_float_eq(cfg.pre.std[c], 0.5f);
    }
}
END_TEST

/* deit-style: ImageNet constants as JSON doubles (rounded to float32 as torch does), avg pool, squash and
 * bilinear; num_classes only inside pretrained_cfg; unknown keys (model_args, label_names) ignored. */
START_TEST(test_timm_config_variants) {
    tp_timm_config cfg;
    tp_error err = {0};
    ck_assert_msg(read_cfg("{\"architecture\": \"vit_small_patch16_384\", \"global_pool\": \"avg\","
                           " \"model_args\": {\"img_size\": 384, \"class_token\": false},"
                           " \"label_names\": [\"a\", \"b\"],"
                           " \"pretrained_cfg\": {\"input_size\": [3, 384, 384], \"interpolation\": \"bilinear\","
                           " \"crop_pct\": 1, \"crop_mode\": \"squash\", \"mean\": [0.485, 0.456, 0.406],"
                           " \"std\": [0.229, 0.224, 0.225], \"num_classes\": 21843, \"license\": \"mit\"}}",
                           &cfg, &err) == TP_OK,
                  "%s", err.msg);
    ck_assert_int_eq(cfg.num_classes, 21843);
    ck_assert_int_eq(cfg.num_features, -1);
    ck_assert_int_eq(cfg.global_pool, TP_TIMM_POOL_AVG);
    ck_assert_str_eq(cfg.tag, "");
    ck_assert_int_eq(cfg.pre.img_size, 384);
    ck_assert_double_eq(cfg.pre.crop_pct, 1.0);
    ck_assert_int_eq(cfg.pre.interpolation, TP_INTERP_BILINEAR);
    ck_assert_int_eq(cfg.pre.crop_mode, TP_CROP_SQUASH);
    ck_assert(cfg.pre.mean[0] == 0.485f && cfg.pre.mean[1] == 0.456f && cfg.pre.mean[2] == 0.406f);
    ck_assert(cfg.pre.std[0] == 0.229f && cfg.pre.std[1] == 0.224f && cfg.pre.std[2] == 0.225f);

    /* top-level num_classes wins over pretrained_cfg's (timm's _parse_model_cfg) */
    ck_assert_int_eq(read_cfg("{\"num_classes\": 10, \"pretrained_cfg\": {\"num_classes\": 1000}}", &cfg, &err),
                     TP_OK);
    ck_assert_int_eq(cfg.num_classes, 10);
    /* nearest, and num_classes 0 (a headless checkpoint) */
    ck_assert_int_eq(read_cfg("{\"num_classes\": 0, \"pretrained_cfg\": {\"interpolation\": \"nearest\"}}", &cfg,
                              &err),
                     TP_OK);
    ck_assert_int_eq(cfg.num_classes, 0);
    ck_assert_int_eq(cfg.pre.interpolation, TP_INTERP_NEAREST);
}
END_TEST

/* Missing, null and empty fields take timm's defaults (resolve_data_config tests them for truth). */
START_TEST(test_timm_config_defaults) {
    tp_timm_config cfg;
    tp_error err = {0};
    static const char *const docs[] = {
        "{\"pretrained_cfg\": {}}",
        ("{\"pretrained_cfg\": {\"input_size\": null, \"crop_pct\": null, \"interpolation\": \"\", \"mean\": [],"
         " \"std\": null, \"crop_mode\": null, \"tag\": null}}"),
        "{\"pretrained_cfg\": {\"crop_pct\": 0, \"interpolation\": null, \"crop_mode\": \"\"}}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        memset(&cfg, 0x5A, sizeof cfg);
        ck_assert_msg(read_cfg(docs[i], &cfg, &err) == TP_OK, "doc %zu: %s", i, err.msg);
        ck_assert_str_eq(cfg.architecture, "");
        ck_assert_str_eq(cfg.tag, "");
        ck_assert_int_eq(cfg.num_classes, -1);
        ck_assert_int_eq(cfg.num_features, -1);
        ck_assert_int_eq(cfg.global_pool, TP_TIMM_POOL_ABSENT);
        ck_assert_int_eq(cfg.has_pre, 1);
        ck_assert_int_eq(cfg.pre.img_size, 224);
        ck_assert_double_eq(cfg.pre.crop_pct, 0.875);
        ck_assert_int_eq(cfg.pre.interpolation, TP_INTERP_BICUBIC);
        ck_assert_int_eq(cfg.pre.crop_mode, TP_CROP_CENTER);
        ck_assert(cfg.pre.mean[0] == 0.485f && cfg.pre.mean[1] == 0.456f && cfg.pre.mean[2] == 0.406f);
        ck_assert(cfg.pre.std[0] == 0.229f && cfg.pre.std[1] == 0.224f && cfg.pre.std[2] == 0.225f);
    }
    /* no pretrained_cfg at all: not an error, no data config */
    memset(&cfg, 0x5A, sizeof cfg);
    ck_assert_int_eq(read_cfg("{\"architecture\": \"vit_tiny_patch16_224\", \"num_classes\": 10}", &cfg, &err),
                     TP_OK);
    ck_assert_int_eq(cfg.has_pre, 0);
    ck_assert_int_eq(cfg.num_classes, 10);
    ck_assert_int_eq(cfg.pre.img_size, 0);
    ck_assert_int_eq(read_cfg("{}", &cfg, &err), TP_OK);
    ck_assert_int_eq(cfg.has_pre, 0);
    /* the legacy single-dict layout: the data fields at the top level */
    ck_assert_msg(read_cfg("{\"architecture\": \"vit_base_patch16_384\", \"num_features\": 768, \"num_classes\": 5,"
                           " \"input_size\": [3, 384, 384], \"crop_pct\": 1.0, \"interpolation\": \"bilinear\","
                           " \"mean\": [0.5, 0.5, 0.5], \"std\": [0.5, 0.5, 0.5], \"tag\": \"augreg_in21k_ft_in1k\"}",
                           &cfg, &err) == TP_OK,
                  "%s", err.msg);
    ck_assert_int_eq(cfg.has_pre, 1);
    ck_assert_int_eq(cfg.pre.img_size, 384);
    ck_assert_int_eq(cfg.pre.interpolation, TP_INTERP_BILINEAR);
    ck_assert_str_eq(cfg.tag, "augreg_in21k_ft_in1k");
    ck_assert_int_eq(cfg.num_classes, 5);
}
END_TEST

/* SigLIP-style checkpoints: global_pool '' (no pooling) and model_args.act_layer; an activation tprof's ViT does
 * not run is refused by name, a model_args of the wrong type too. */
START_TEST(test_timm_config_tokens_act_layer) {
    tp_timm_config cfg;
    tp_error err = {0};
    ck_assert_msg(read_cfg("{\"global_pool\": \"\", \"model_args\": {\"act_layer\": \"gelu_tanh\", \"depth\": 2}}",
                           &cfg, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(cfg.global_pool, TP_TIMM_POOL_NONE);
    ck_assert_int_eq(cfg.act_layer, 1);
    ck_assert_int_eq(read_cfg("{\"model_args\": {\"act_layer\": \"gelu\"}}", &cfg, &err), TP_OK);
    ck_assert_int_eq(cfg.act_layer, 0);
    ck_assert_int_eq(read_cfg("{\"global_pool\": \"token\"}", &cfg, &err), TP_OK);
    ck_assert_int_eq(cfg.act_layer, -1);
    ck_assert_int_eq(read_cfg("{\"model_args\": {\"act_layer\": \"quick_gelu\"}}", &cfg, &err), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "model_args.act_layer"));
    ck_assert_ptr_nonnull(strstr(err.msg, "quick_gelu"));
    ck_assert_int_eq(read_cfg("{\"model_args\": [1]}", &cfg, &err), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "model_args"));
    ck_assert_int_eq(read_cfg("{\"model_args\": {\"act_layer\": 3}}", &cfg, &err), TP_ERR_FORMAT);
    ck_assert_int_eq(read_cfg("{\"global_pool\": \"map\"}", &cfg, &err), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "'map'"));
}
END_TEST

/* Every error: the expected code, one line starting with the file's path and naming the field (or value). */
START_TEST(test_timm_config_errors) {
    char long_name[400];
    snprintf(long_name, sizeof long_name, "{\"architecture\": \"%0200d\"}", 7);
    const struct {
        const char *json;
        tp_status code;
        const char *needle;
    } cases[] = {
        {"{\"pretrained_cfg\": {\"mean\": [0.5, 0.5]}}", TP_ERR_FORMAT,
         "field 'pretrained_cfg.mean': expected 3 numbers"},
        {"{\"pretrained_cfg\": {\"mean\": [\"a\", 0.5, 0.5]}}", TP_ERR_FORMAT, "'pretrained_cfg.mean'"},
        {"{\"pretrained_cfg\": {\"mean\": {\"r\": 1}}}", TP_ERR_FORMAT, "'pretrained_cfg.mean'"},
        {"{\"pretrained_cfg\": {\"std\": [0.5, 0, 0.5]}}", TP_ERR_FORMAT, "'pretrained_cfg.std': expected 3 non-zero"},
        {"{\"pretrained_cfg\": {\"std\": [0.5, 1e300, 0.5]}}", TP_ERR_FORMAT, "'pretrained_cfg.std'"},
        {"{\"pretrained_cfg\": {\"input_size\": \"224\"}}", TP_ERR_FORMAT, "'pretrained_cfg.input_size'"},
        {"{\"pretrained_cfg\": {\"input_size\": [3, 224]}}", TP_ERR_FORMAT, "'pretrained_cfg.input_size'"},
        {"{\"pretrained_cfg\": {\"input_size\": [3, 224.0, 224]}}", TP_ERR_FORMAT, "'pretrained_cfg.input_size'"},
        {"{\"pretrained_cfg\": {\"input_size\": [3, -2, -2]}}", TP_ERR_FORMAT, "'pretrained_cfg.input_size'"},
        {"{\"pretrained_cfg\": {\"input_size\": [3, 20000, 20000]}}", TP_ERR_FORMAT, "'pretrained_cfg.input_size'"},
        {"{\"pretrained_cfg\": {\"crop_pct\": \"0.9\"}}", TP_ERR_FORMAT, "'pretrained_cfg.crop_pct'"},
        {"{\"pretrained_cfg\": {\"crop_pct\": -0.5}}", TP_ERR_FORMAT, "'pretrained_cfg.crop_pct'"},
        {"{\"pretrained_cfg\": {\"interpolation\": 3}}", TP_ERR_FORMAT,
         "'pretrained_cfg.interpolation': expected a string"},
        {"{\"pretrained_cfg\": {\"crop_mode\": true}}", TP_ERR_FORMAT, "'pretrained_cfg.crop_mode'"},
        {"{\"pretrained_cfg\": {\"tag\": 12}}", TP_ERR_FORMAT, "'pretrained_cfg.tag'"},
        {"{\"pretrained_cfg\": [1, 2]}", TP_ERR_FORMAT, "'pretrained_cfg': expected an object"},
        {"{\"architecture\": 5}", TP_ERR_FORMAT, "'architecture': expected a string"},
        {long_name, TP_ERR_FORMAT, "'architecture': longer than"},
        {"{\"num_classes\": \"1000\"}", TP_ERR_FORMAT, "'num_classes'"},
        {"{\"num_classes\": -3}", TP_ERR_FORMAT, "'num_classes'"},
        {"{\"num_classes\": 1000.0}", TP_ERR_FORMAT, "'num_classes'"},
        {"{\"num_features\": [768]}", TP_ERR_FORMAT, "'num_features'"},
        {"{\"pretrained_cfg\": {\"num_classes\": \"x\"}}", TP_ERR_FORMAT, "'pretrained_cfg.num_classes'"},
        {"{\"global_pool\": 1}", TP_ERR_FORMAT, "'global_pool'"},
        {"[1, 2, 3]", TP_ERR_FORMAT, "top level"},
        {"{\"architecture\": \"vit\",\n \"num_classes\": }", TP_ERR_FORMAT, "line 2"},
        {"", TP_ERR_FORMAT, "invalid JSON"},
        {"{\"mean\": [1, 2]}", TP_ERR_FORMAT, "field 'mean'"}, /* legacy layout: top-level names */
        /* valid timm values tprof does not run, named */
        {"{\"pretrained_cfg\": {\"input_size\": [3, 224, 256]}}", TP_ERR_UNSUPPORTED, "[3, 224, 256] is not square"},
        {"{\"pretrained_cfg\": {\"input_size\": [1, 224, 224]}}", TP_ERR_UNSUPPORTED, "1 input channels"},
        {"{\"pretrained_cfg\": {\"interpolation\": \"lanczos\"}}", TP_ERR_UNSUPPORTED, "'lanczos'"},
        {"{\"pretrained_cfg\": {\"interpolation\": \"random\"}}", TP_ERR_UNSUPPORTED, "'random'"},
        {"{\"pretrained_cfg\": {\"crop_mode\": \"border\"}}", TP_ERR_UNSUPPORTED, "'border'"},
        {"{\"global_pool\": \"map\"}", TP_ERR_UNSUPPORTED, "'global_pool': 'map'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tp_timm_config cfg, before;
        memset(&cfg, 0x5A, sizeof cfg);
        memcpy(&before, &cfg, sizeof cfg);
        tp_error err = {0};
        tp_status st = read_cfg(cases[i].json, &cfg, &err);
        ck_assert_msg(st == cases[i].code, "case %zu (%s): status %d, want %d (%s)", i, cases[i].json, st,
                      cases[i].code, err.msg);
        ck_assert_int_eq(err.code, cases[i].code);
        ck_assert_msg(strstr(err.msg, cases[i].needle) != NULL, "case %zu: message '%s' lacks '%s'", i, err.msg,
                      cases[i].needle);
        ck_assert_msg(strncmp(err.msg, path_in("config.json"), strlen(path_in("config.json"))) == 0,
                      "case %zu: message '%s' does not start with the path", i, err.msg);
        ck_assert_ptr_null(strchr(err.msg, '\n'));
        ck_assert_msg(memcmp(&cfg, &before, sizeof cfg) == 0, "case %zu: *out written on error", i);
    }
    /* I/O and arguments */
    tp_timm_config cfg;
    tp_error err = {0};
    ck_assert_int_eq(tp_timm_config_read(path_in("missing.json"), &cfg, &err), TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, path_in("missing.json")));
    ck_assert_int_eq(tp_timm_config_read(g_dir, &cfg, &err), TP_ERR_IO);
    ck_assert_int_eq(tp_timm_config_read(NULL, &cfg, &err), TP_ERR_ARG);
    write_text("ok.json", "{}");
    ck_assert_int_eq(tp_timm_config_read(path_in("ok.json"), NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_timm_config_read(path_in("ok.json"), &cfg, NULL), TP_OK); /* err is optional */
}
END_TEST

START_TEST(test_timm_config_beside) {
    char buf[256], want[256];
    ck_assert_int_eq(mkdir(path_in("repo"), 0700), 0);
    write_text("repo/model.safetensors", "x");
    snprintf(want, sizeof want, "%s/repo/config.json", g_dir);
    ck_assert_int_eq(tp_timm_config_beside(path_in("repo/model.safetensors"), buf, sizeof buf), 0);
    ck_assert_str_eq(buf, want); /* the path, even when the file is missing */
    write_text("repo/config.json", "{}");
    ck_assert_int_eq(tp_timm_config_beside(path_in("repo/model.safetensors"), buf, sizeof buf), 1);
    ck_assert_str_eq(buf, want);
    ck_assert_int_eq(mkdir(path_in("repo2"), 0700), 0);
    ck_assert_int_eq(mkdir(path_in("repo2/config.json"), 0700), 0); /* a folder is not the file */
    ck_assert_int_eq(tp_timm_config_beside(path_in("repo2/model.safetensors"), buf, sizeof buf), 0);
    /* no folder in the name: the current directory's config.json */
    ck_assert_int_eq(tp_timm_config_beside("model.safetensors", buf, sizeof buf), access("config.json", F_OK) == 0);
    ck_assert_str_eq(buf, "config.json");
    /* too small a buffer: 0 and "" */
    ck_assert_int_eq(tp_timm_config_beside(path_in("repo/model.safetensors"), buf, 12), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(tp_timm_config_beside(NULL, buf, sizeof buf), 0);
}
END_TEST

/* ---- latency statistics ------------------------------------------------------------------------------ */

START_TEST(test_latency_percentiles) {
    double s[100];
    for (int i = 0; i < 100; i++) s[i] = (double)((i * 37) % 100 + 1); /* 1..100, shuffled */
    double copy[100];
    memcpy(copy, s, sizeof s);
    tp_latency_stats st;
    tp_latency_stats_compute(s, 100, &st);
    ck_assert_int_eq(memcmp(copy, s, sizeof s), 0); /* input untouched */
    ck_assert_int_eq(st.n, 100);
    ck_assert_double_eq(st.min, 1.0);
    ck_assert_double_eq(st.max, 100.0);
    ck_assert_double_eq(st.mean, 50.5);
    ck_assert_double_eq(st.median, 50.0); /* nearest rank: ceil(0.5 * 100) = 50th value */
    ck_assert_double_eq(st.p90, 90.0);
    ck_assert_double_eq(st.p95, 95.0);
    ck_assert_double_eq(st.p99, 99.0);
    double sd = sqrt((100.0 * 100.0 - 1.0) / 12.0); /* population sd of 1..n: sqrt((n^2 - 1) / 12) */
    ck_assert_double_eq_tol(st.stddev, sd, 1e-12);
    ck_assert_double_eq_tol(st.cov, sd / 50.5, 1e-12);
}
END_TEST

/* Percentile calibration from a histogram: the top edge of the bin where the cumulative count reaches p%. */
START_TEST(test_hist_percentile) {
    unsigned bins[10] = {50, 20, 10, 10, 5, 2, 1, 1, 0, 1}; /* 100 values over [0, 20], bins 2 wide */
    ck_assert_double_eq(tp_hist_percentile(bins, 10, 20.0, 50.0), 2.0);   /* 50 reached in bin 0 */
    ck_assert_double_eq(tp_hist_percentile(bins, 10, 20.0, 50.5), 4.0);
    ck_assert_double_eq(tp_hist_percentile(bins, 10, 20.0, 90.0), 8.0);   /* 50 + 20 + 10 + 10 */
    ck_assert_double_eq(tp_hist_percentile(bins, 10, 20.0, 99.0), 16.0);  /* 98 after bin 6, 99 after bin 7 */
    ck_assert_double_eq(tp_hist_percentile(bins, 10, 20.0, 99.5), 20.0);  /* the last value sits in the top bin */
    ck_assert_double_eq(tp_hist_percentile(bins, 10, 20.0, 100.0), 20.0); /* never above amax */
    unsigned empty[4] = {0, 0, 0, 0};
    ck_assert_double_eq(tp_hist_percentile(empty, 4, 3.0, 99.9), 3.0);
    /* a large histogram: 99.99% of 1e6 uniform values lies within a bin of 0.9999 * amax */
    unsigned *u = calloc(2048, sizeof *u);
    for (int i = 0; i < 1000000; i++) u[(int)((i + 0.5) / 1e6 * 2048)]++;
    double p = tp_hist_percentile(u, 2048, 1.0, 99.99);
    ck_assert(p >= 0.9999 && p <= 0.9999 + 1.0 / 2048);
    free(u);
}
END_TEST

START_TEST(test_latency_small) {
    tp_latency_stats st;
    double two[2] = {11.0, 9.0};
    tp_latency_stats_compute(two, 2, &st);
    ck_assert_double_eq(st.mean, 10.0);
    ck_assert_double_eq(st.stddev, 1.0);
    ck_assert_double_eq(st.cov, 0.1);
    ck_assert_double_eq(st.median, 9.0); /* rank ceil(1.0) = 1 */
    ck_assert_double_eq(st.p90, 11.0);   /* rank ceil(1.8) = 2 */
    double ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    tp_latency_stats_compute(ten, 10, &st);
    ck_assert_double_eq(st.median, 5.0);
    ck_assert_double_eq(st.p90, 9.0);  /* rank 9 */
    ck_assert_double_eq(st.p95, 10.0); /* rank ceil(9.5) = 10 */
    ck_assert_double_eq(st.p99, 10.0);
    double one = 3.25;
    tp_latency_stats_compute(&one, 1, &st);
    ck_assert_int_eq(st.n, 1);
    ck_assert_double_eq(st.min, 3.25);
    ck_assert_double_eq(st.p99, 3.25);
    ck_assert_double_eq(st.stddev, 0.0);
    ck_assert_double_eq(st.cov, 0.0);
    /* n == 0: all zeros, no crash */
    memset(&st, 0x7F, sizeof st);
    tp_latency_stats_compute(NULL, 0, &st);
    ck_assert_int_eq(st.n, 0);
    ck_assert_double_eq(st.mean, 0.0);
    ck_assert_double_eq(st.p99, 0.0);
    ck_assert_double_eq(st.cov, 0.0);
    /* a stable benchmark: tiny spread on a large mean must not cancel to garbage */
    double stable[4] = {1e6 + 0.001, 1e6 - 0.001, 1e6 + 0.001, 1e6 - 0.001};
    tp_latency_stats_compute(stable, 4, &st);
    ck_assert_double_eq_tol(st.stddev, 0.001, 1e-9);
}
END_TEST

/* ---- accuracy metrics -------------------------------------------------------------------------------- */

START_TEST(test_accuracy_identical) {
    float x[6] = {0.1f, -2.0f, 3.5f, 7.0f, 1e-3f, -0.25f};
    tp_accuracy a;
    tp_accuracy_compute(x, x, 2, 3, &a);
    ck_assert_double_eq(a.cosine, 1.0);
    ck_assert_double_eq(a.rel_l2, 0.0);
    ck_assert_double_eq(a.max_abs, 0.0);
    ck_assert_double_eq(a.top1_agree, 1.0);
    ck_assert_int_eq(a.rows, 2);
    ck_assert_int_eq(a.nonfinite, 0);
}
END_TEST

/* r = [[3, 4, 0], [0, 1, 2]], x = [[3, 4, 1], [0, 2, 1]]:
 *   x - r = [0, 0, 1, 0, 1, -1]: |x - r| = sqrt(3), max_abs = 1;
 *   |r|^2 = 9 + 16 + 1 + 4 = 30, |x|^2 = 9 + 16 + 1 + 4 + 1 = 31, <x, r> = 9 + 16 + 2 + 2 = 29;
 *   cosine = 29 / sqrt(930), rel_l2 = sqrt(3 / 30) = sqrt(0.1);
 *   argmax: row 0: x 1, r 1 (agree); row 1: x 1, r 2 (disagree) -> 0.5. */
START_TEST(test_accuracy_known_perturbation) {
    float r[6] = {3, 4, 0, 0, 1, 2};
    float x[6] = {3, 4, 1, 0, 2, 1};
    tp_accuracy a;
    tp_accuracy_compute(x, r, 2, 3, &a);
    ck_assert_double_eq_tol(a.cosine, 29.0 / sqrt(930.0), 1e-15);
    ck_assert_double_eq_tol(a.cosine, 0.9509474618867317, 1e-13);
    ck_assert_double_eq_tol(a.rel_l2, sqrt(0.1), 1e-15);
    ck_assert_double_eq(a.max_abs, 1.0);
    ck_assert_double_eq(a.top1_agree, 0.5);
    ck_assert_int_eq(a.nonfinite, 0);
}
END_TEST

START_TEST(test_accuracy_argmax_first_max) {
    /* ties: the first maximum wins in both x and r */
    float x[9] = {5, 5, 1, /**/ 1, 5, 5, /**/ 2, 2, 2};
    float r[9] = {5, 1, 5, /**/ 1, 5, 1, /**/ 1, 3, 3};
    tp_accuracy a;
    tp_accuracy_compute(x, r, 3, 3, &a);
    /* row 0: 0 vs 0 agree; row 1: 1 vs 1 agree; row 2: 0 vs 1 disagree */
    ck_assert_double_eq_tol(a.top1_agree, 2.0 / 3.0, 1e-15);
    /* one column: argmax is 0 everywhere */
    tp_accuracy_compute(x, r, 9, 1, &a);
    ck_assert_double_eq(a.top1_agree, 1.0);
}
END_TEST

START_TEST(test_accuracy_nonfinite) {
    float r[4] = {1, 2, 3, 4};
    float x[4] = {1, NAN, 3, INFINITY};
    tp_accuracy a;
    tp_accuracy_compute(x, r, 1, 4, &a);
    ck_assert_int_eq(a.nonfinite, 2);
    ck_assert(isnan(a.cosine));
    ck_assert(isnan(a.rel_l2));
    ck_assert(isnan(a.max_abs));
    ck_assert(isnan(a.top1_agree));
    float x2[4] = {1, 2, 3, -INFINITY};
    tp_accuracy_compute(x2, r, 2, 2, &a);
    ck_assert_int_eq(a.nonfinite, 1);
    /* a broken reference: metrics NaN, nonfinite counts x only */
    tp_accuracy_compute(r, x, 1, 4, &a);
    ck_assert_int_eq(a.nonfinite, 0);
    ck_assert(isnan(a.cosine));
}
END_TEST

START_TEST(test_accuracy_degenerate) {
    tp_accuracy a;
    tp_accuracy_compute(NULL, NULL, 0, 10, &a);
    ck_assert_int_eq(a.rows, 0);
    ck_assert_int_eq(a.nonfinite, 0);
    ck_assert(isnan(a.cosine));
    ck_assert(isnan(a.top1_agree));
    ck_assert_double_eq(a.max_abs, 0.0);
    float z[3] = {0, 0, 0}, o[3] = {0, 1, 0};
    tp_accuracy_compute(z, z, 1, 3, &a);
    ck_assert_double_eq(a.cosine, 1.0);
    ck_assert_double_eq(a.rel_l2, 0.0);
    tp_accuracy_compute(o, z, 1, 3, &a);
    ck_assert_double_eq(a.cosine, 0.0);
    ck_assert(isinf(a.rel_l2));
    ck_assert_double_eq(a.max_abs, 1.0);
}
END_TEST

START_TEST(test_accuracy_fp64_accumulation) {
    /* 10^6 values of 1 + 1e-4 against 1: fp32 accumulation of squares would drift; fp64 gives rel_l2 1e-4 to
     * ~7 digits (the float nearest to 1.0001 is 1.00010001659393...). */
    int n = 1000000;
    float *x = malloc(n * sizeof *x), *r = malloc(n * sizeof *r);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(r);
    for (int i = 0; i < n; i++) x[i] = 1.0001f, r[i] = 1.0f;
    tp_accuracy a;
    tp_accuracy_compute(x, r, 1000, 1000, &a);
    double d = (double)1.0001f - 1.0;
    ck_assert_double_eq_tol(a.rel_l2, d, 1e-12);
    ck_assert_double_eq_tol(a.max_abs, d, 1e-15);
    ck_assert_double_eq_tol(a.cosine, 1.0, 1e-9); /* 10^6-term fp64 sums: ~n * eps relative */
    free(x);
    free(r);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("image_stats");
    TCase *img = tcase_create("image");
    tcase_add_unchecked_fixture(img, setup_root, teardown_root);
    tcase_add_checked_fixture(img, setup_dir, teardown_dir);
    tcase_set_timeout(img, 60);
    tcase_add_test(img, test_gradient_size_and_range);
    tcase_add_test(img, test_constant_image_exact);
    tcase_add_test(img, test_crop_pct_above_one_pads);
    tcase_add_test(img, test_center_crop_picks_center);
    tcase_add_test(img, test_crop_offset_rounding);
    tcase_add_test(img, test_resize_truncates_long_side);
    tcase_add_test(img, test_grayscale_replicated);
    tcase_add_test(img, test_rgba_alpha_dropped);
    tcase_add_test(img, test_jpeg_decodes);
    tcase_add_test(img, test_folder_cycles);
    tcase_add_test(img, test_folder_more_files_than_batch);
    tcase_add_test(img, test_single_file_repeated);
    tcase_add_test(img, test_missing_file);
    tcase_add_test(img, test_text_file_named_png);
    tcase_add_test(img, test_truncated_png);
    tcase_add_test(img, test_huge_declared_size);
    tcase_add_test(img, test_empty_folder);
    tcase_add_test(img, test_bad_arguments);
    tcase_add_test(img, test_interp_crop_names);
    tcase_add_test(img, test_enum_out_of_range);
    tcase_add_test(img, test_border_weights_by_hand);
    tcase_add_test(img, test_nearest_and_squash);
    tcase_add_test(img, test_squash_pads);
    tcase_add_test(img, test_pil_golden);
    tcase_add_test(img, test_pil12_golden);
    suite_add_tcase(s, img);

    TCase *tc = tcase_create("timm_config");
    tcase_add_unchecked_fixture(tc, setup_root, teardown_root);
    tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_timm_config_hub_file);
    tcase_add_test(tc, test_timm_config_variants);
    tcase_add_test(tc, test_timm_config_defaults);
    tcase_add_test(tc, test_timm_config_tokens_act_layer);
    tcase_add_test(tc, test_timm_config_errors);
    tcase_add_test(tc, test_timm_config_beside);
    suite_add_tcase(s, tc);

    TCase *st = tcase_create("stats");
    tcase_set_timeout(st, 60);
    tcase_add_test(st, test_latency_percentiles);
    tcase_add_test(st, test_latency_small);
    tcase_add_test(st, test_hist_percentile);
    tcase_add_test(st, test_accuracy_identical);
    tcase_add_test(st, test_accuracy_known_perturbation);
    tcase_add_test(st, test_accuracy_argmax_first_max);
    tcase_add_test(st, test_accuracy_nonfinite);
    tcase_add_test(st, test_accuracy_degenerate);
    tcase_add_test(st, test_accuracy_fp64_accumulation);
    suite_add_tcase(s, st);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
