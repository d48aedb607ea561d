/* image.h: image input with timm's eval preprocessing, reproduced bit for bit on PNG/BMP input.
 *
 * What timm does (timm 1.0.x, timm.data.transforms_factory.transforms_imagenet_eval, reached through
 * timm.data.resolve_data_config + create_transform with the model's pretrained_cfg; the loader opens files with
 * PIL Image.open(f).convert("RGB")), for a square img_size S:
 *   scale_size = floor(S / crop_pct)   (math.floor of the double division)
 *   crop_mode "center" (default): torchvision Resize(scale_size, interpolation): the shorter side becomes
 *       scale_size, the longer int(scale_size * long / short) (torchvision _compute_resized_output_size:
 *       truncation); no resampling at all when that is already the size; then CenterCrop(S).
 *   crop_mode "squash": Resize((scale_size, scale_size)): both sides exactly scale_size (aspect ratio not
 *       kept), then CenterCrop(S).
 *   crop_mode "border" (ResizeKeepRatio on the longer side + CenterCropOrPad with the mean as fill): not
 *       implemented; there is no enum value for it, and tp_crop_mode_parse("border") returns -1.
 *   CenterCrop(S) (torchvision functional.center_crop): where the resized image is smaller than S, pad with 0
 *       (left/top (S - size) // 2, the rest right/bottom); then offset int(round((size - S) / 2.0)), Python's
 *       round (ties to even).
 *   ToTensor: uint8 -> float32, then / 255 (an IEEE fp32 division); Normalize: tensor.sub_(mean).div_(std) in
 *       fp32, mean and std rounded to float32 first (torch.tensor of Python floats).
 * torchvision's Resize on a PIL image calls PIL Image.resize(size, filter) without reducing_gap, which runs
 * Pillow's libImaging/Resample.c (bicubic, bilinear) or its nearest-neighbour affine scaler
 * (libImaging/Geometry.c, ImagingScaleAffine). image.c implements that arithmetic itself:
 *   bicubic (a = -0.5, support 2) and bilinear (triangle, support 1), both widened by the downscale factor
 *   (antialiasing), weights computed in double, normalized to sum 1, converted to 22-bit fixed point, two
 *   separable passes with an 8-bit rounded and clamped image in between, each pass skipped when its axis keeps
 *   its size. The pass order is part of the result (the intermediate image is rounded and clamped) and
 *   changed in Pillow 13, which runs the vertical pass first when the height shrinks by more than twice as
 *   many pixels as the width; Pillow 12 and older always run the horizontal pass first. The two differ (by up
 *   to 24 levels with bicubic on hard edges) only for such strong vertical downscales: in center mode a
 *   portrait image taller than 2:1, in squash mode more often. tp_preprocess.pillow_version picks the order.
 *   nearest: source pixel floor((x + 0.5) * in / out) accumulated in double as Pillow does.
 * Measured by tools/check_preprocess_pil.py against Pillow 13.0 (pillow_version 0) and 12.2, 12.3
 * (pillow_version 12) on synthetic PNGs of awkward sizes (RGB, gray, 16-bit gray, gray+alpha, RGBA, palette),
 * both crop modes, every filter: 0 differing 8-bit values, and the fp32 outputs equal bit for bit to numpy's
 * fp32 (x / 255 - mean) / std; timm 1.0.29's own transform (torch 2.11, torchvision 0.26, Pillow 12.3) equals
 * that emulation bit for bit (tools/make_timm_golden.py).
 *
 * Decoding (stb_image): PNG, JPEG, BMP. As PIL's convert("RGB"): gray is replicated, alpha dropped without
 * compositing, palettes expanded (all checked); 16-bit gray (PIL mode I;16) is clipped to 255 as PIL's I;16 ->
 * RGB conversion does, not shifted (checked); 16-bit RGB(A) and gray+alpha keep the high byte, as Pillow's
 * PNG decoder reads them (not checked: PIL cannot write such files). JPEG is decoded by stb, not libjpeg: its
 * IDCT and chroma upsampling differ, so JPEG input does not match timm bit for bit.
 *
 * Only the crop window of the resized image is computed (Pillow's weights for an output pixel do not depend on
 * the others, so a window of the output is exact), so an extreme aspect ratio cannot blow up memory: the
 * intermediate image never exceeds the crop's side times the decoded image's side, 3 bytes a pixel. */
#ifndef TP_IMAGE_H
#define TP_IMAGE_H

#include "tprof.h"

/* Resampling filter of the resize (timm's pretrained_cfg "interpolation"). 0 is timm's default. */
typedef enum {
    TP_INTERP_BICUBIC = 0, /* "bicubic": PIL Image.BICUBIC */
    TP_INTERP_BILINEAR,    /* "bilinear": PIL Image.BILINEAR */
    TP_INTERP_NEAREST,     /* "nearest": PIL Image.NEAREST */
    TP_INTERP_COUNT
} tp_interp;

/* How the resize relates to the crop (timm's pretrained_cfg "crop_mode"). 0 is timm's default. */
typedef enum {
    TP_CROP_CENTER = 0, /* "center": shorter side to scale_size, aspect kept, center crop */
    TP_CROP_SQUASH,     /* "squash": both sides to scale_size, center crop */
    TP_CROP_COUNT
} tp_crop_mode;

/* A zero-initialised tail (interpolation, crop_mode, pillow_version) means bicubic + center + the newest
 * Pillow, so {img_size, crop_pct, mean, std} initialisers keep their meaning. */
typedef struct {
    int img_size;     /* square crop side S, e.g. 224; [1, 16384] */
    double crop_pct;  /* e.g. 0.9 (timm's augreg ViTs), 1.0 for 384 models; > 0; above 1 pads with zeros */
    float mean[3], std[3]; /* per channel, on the [0, 1] scale; std != 0 */
    tp_interp interpolation;
    tp_crop_mode crop_mode;
    int pillow_version; /* major version of the Pillow whose resize to reproduce: 0 = the newest known (13);
                         * 1..12 = Pillow 12 and older (horizontal pass always first); 13 and above = 13's
                         * pass order. Checked against Pillow 12.2, 12.3 and 13.0. */
    double max_pixels;  /* the most pixels (width x height, from the header) an image may declare; 0 = the
                         * default TP_IMAGE_MAX_PIXELS; the fuzz harness sets a small one to keep its rate */
} tp_preprocess;

/* "bicubic", "bilinear", "nearest" (timm's strings); "?" for a value out of range. */
const char *tp_interp_name(tp_interp i);
/* The tp_interp named s (exactly timm's lower-case strings above), or -1 for anything else (NULL too): timm's
 * "box", "hamming", "lanczos" and "random" are refused this way, so a checkpoint asking for one is an error. */
int tp_interp_parse(const char *s);
/* "center", "squash"; "?" for a value out of range. */
const char *tp_crop_mode_name(tp_crop_mode m);
/* The tp_crop_mode named s, or -1 (timm's "border" included). */
int tp_crop_mode_parse(const char *s);

/* The most pixels (width x height, from the file's header, before decoding) an image may have by default: 2^27,
 * about 134 million, a 100-megapixel camera's frame included; larger is refused rather than decoded and resized for
 * minutes (tp_preprocess.max_pixels sets another). */
#define TP_IMAGE_MAX_PIXELS 134217728.0

/* Loads one image file into dst (3, img_size, img_size) fp32 normalized. Errors: TP_ERR_ARG (pp invalid: size,
 * crop_pct, mean/std, or an interpolation/crop_mode value out of range, named), TP_ERR_IO (missing),
 * TP_ERR_FORMAT (not a decodable image, with stb_image's reason; a resize size out of range), TP_ERR_UNSUPPORTED
 * (more pixels than pp->max_pixels or TP_IMAGE_MAX_PIXELS, with the size), TP_ERR_OOM. */
tp_status tp_image_load(const char *path, const tp_preprocess *pp, float *dst, tp_error *err);

/* Fills a batch (B, 3, S, S) from path: a file is repeated over the batch; a folder contributes its image
 * files (by extension png/jpg/jpeg/bmp, sorted by name), cycled to fill the batch. *n_files receives how many
 * distinct images were used. Errors: TP_ERR_ARG, TP_ERR_IO (missing, empty folder), TP_ERR_FORMAT, TP_ERR_OOM. */
tp_status tp_image_load_batch(const char *path, const tp_preprocess *pp, int B, float *dst, int *n_files,
                              tp_error *err);

/* The 8-bit stage alone, for tests and tools: decodes path as tp_image_load does, resizes and crops it, and
 * writes the (S, S, 3) RGB crop (row-major, HWC) to rgb, zero where the crop pads the image (torchvision pads the
 * PIL image with 0 before ToTensor). tp_image_load is exactly this followed by (rgb / 255 - mean) / std in fp32.
 * Errors as tp_image_load. */
tp_status tp_image_load_rgb8(const char *path, const tp_preprocess *pp, unsigned char *rgb, tp_error *err);

#endif
