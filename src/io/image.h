/* image.h: image input with timm's default eval preprocessing.
 *
 * timm (timm.data.transforms_factory.transforms_imagenet_eval, create_transform with the model's
 * pretrained_cfg): Resize the shorter side to floor(img_size / crop_pct) with bicubic interpolation,
 * CenterCrop(img_size), convert to [0, 1], Normalize(mean, std). Decoding through stb_image (PNG, JPEG, BMP,
 * ...); gray images are replicated to 3 channels, alpha dropped. Resampling through stb_image_resize with the
 * Catmull-Rom cubic (PIL's bicubic is the same a = -0.5 kernel), in linear space, i.e. on the 8-bit values as
 * PIL does. The result matches timm's to within resampling differences, not bit for bit. */
#ifndef TP_IMAGE_H
#define TP_IMAGE_H

#include "tprof.h"

typedef struct {
    int img_size;     /* square crop side, e.g. 224 */
    double crop_pct;  /* e.g. 0.9 (timm's augreg ViTs), 1.0 for 384 models */
    float mean[3], std[3];
} tp_preprocess;

/* Loads one image file into dst (3, img_size, img_size) fp32 normalized. Errors: TP_ERR_IO (missing),
 * TP_ERR_FORMAT (not a decodable image, with stb_image's reason). */
tp_status tp_image_load(const char *path, const tp_preprocess *pp, float *dst, tp_error *err);

/* Fills a batch (B, 3, S, S) from path: a file is repeated over the batch; a folder contributes its image
 * files (by extension png/jpg/jpeg/bmp, sorted by name), cycled to fill the batch. *n_files receives how many
 * distinct images were used. Errors: TP_ERR_IO (missing, empty folder), TP_ERR_FORMAT. */
tp_status tp_image_load_batch(const char *path, const tp_preprocess *pp, int B, float *dst, int *n_files,
                              tp_error *err);

#endif
