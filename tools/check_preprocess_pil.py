#!/usr/bin/env python3
"""Checks tprof's image preprocessing (src/io/image.c) against Pillow, and writes the golden fixtures that
tests/test_image_stats.c compares it with.

    pip install pillow numpy
    python3 tools/check_preprocess_pil.py                    # compare on synthetic images, print the numbers
    python3 tools/check_preprocess_pil.py --write-fixtures   # also (re)write tests/fixtures/preprocess_*

The reference is timm's eval transform (timm.data.transforms_factory.transforms_imagenet_eval, timm 1.0.x) as
torchvision runs it on a PIL image, written out with PIL and numpy here because torch is not needed for it:
  Image.open(f).convert("RGB")                                   timm's loader
  scale = floor(img_size / crop_pct)
  Resize(scale) / Resize((scale, scale)) in squash mode          torchvision: PIL Image.resize(size, filter),
                                                                 skipped when the size is already right
  CenterCrop(img_size)                                           torchvision: zero pad, then round() offsets
  ToTensor, Normalize                                            uint8 -> float32 / 255, (x - mean) / std, fp32
tools/make_timm_golden.py imports reference_rgb8() and reference_normalized() from here and asserts that timm's
own transform gives the same tensor, so a difference between this emulation and timm would show there.

The C side is run through a small driver (its source is DRIVER_C below) compiled with gcc against
src/io/image.c and src/core/status.c alone, so the check needs neither CMake nor the rest of the tree.

The C side reproduces the Pillow that runs this script (tp_preprocess.pillow_version = its major version):
Pillow 13 runs the vertical resampling pass first for strong vertical downscales, Pillow 12 and older always
the horizontal one, and the results differ there. So --write-fixtures does one of two things:
  with Pillow >= 13: writes the source images and preprocess_cases.txt (every case);
  with Pillow <= 12: writes preprocess_cases_pil12.txt (FIXTURE_CASES_PIL12, the cases where the order
                     matters, plus a control), reading the committed source images;
run it once with each (e.g. PYTHONPATH=<a pip --target folder holding pillow 12.x> for the second).

Deterministic: images come from seeded numpy Generators; the fixtures are the same bytes on every run with the
same Pillow (checked with Pillow 13.0.0 and 12.2.0, numpy 2.4).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

PIL_MAJOR = int(Image.__version__.split(".")[0])

PIL_FILTERS = {
    "bicubic": Image.Resampling.BICUBIC,
    "bilinear": Image.Resampling.BILINEAR,
    "nearest": Image.Resampling.NEAREST,
}

# ---- the reference transform ------------------------------------------------------------------------------


def scale_size(img_size, crop_pct):
    """timm: math.floor(img_size / crop_pct)."""
    return math.floor(img_size / crop_pct)


def resized_size(w, h, scale, crop_mode):
    """(new_w, new_h) of torchvision Resize(scale) (shorter side, the longer truncated), or of
    Resize((scale, scale)) in timm's squash mode."""
    if crop_mode == "squash":
        return scale, scale
    if w <= h:
        return scale, int(scale * h / w)
    return int(scale * w / h), scale


def center_crop(arr, size):
    """torchvision.transforms.functional.center_crop on an (h, w, 3) uint8 array: pad with 0 where the image
    is smaller (left/top (size - n) // 2), then offsets int(round((n - size) / 2.0))."""
    h, w = arr.shape[:2]
    if size > w or size > h:
        pl = (size - w) // 2 if size > w else 0
        pt = (size - h) // 2 if size > h else 0
        pr = (size - w + 1) // 2 if size > w else 0
        pb = (size - h + 1) // 2 if size > h else 0
        arr = np.pad(arr, ((pt, pb), (pl, pr), (0, 0)))
        h, w = arr.shape[:2]
        if h == size and w == size:
            return arr
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    return arr[top:top + size, left:left + size]


def pass_order(w, h, new_w, new_h, pillow=13):
    """The order of Pillow's two resampling passes (ImagingResampleInner): from Pillow 13, 'vfirst' when both
    axes change and the height loses more than twice as many pixels as the width; else, and always before
    Pillow 13, 'hfirst'."""
    dh, dw = h - new_h, w - new_w
    if pillow >= 13 and new_w != w and new_h != h and dh > 0 and dh > dw * 2:
        return "vfirst"
    return "hfirst"


def reference_rgb8(img, img_size, crop_pct, interpolation="bicubic", crop_mode="center"):
    """The uint8 (S, S, 3) crop timm/torchvision produce from the RGB PIL image img."""
    assert img.mode == "RGB"
    if crop_mode not in ("center", "squash"):
        raise ValueError(f"crop_mode {crop_mode!r} is not emulated")
    scale = scale_size(img_size, crop_pct)
    w, h = img.size
    new_w, new_h = resized_size(w, h, scale, crop_mode)
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), PIL_FILTERS[interpolation])
    arr = np.asarray(img, dtype=np.uint8)
    return np.ascontiguousarray(center_crop(arr, img_size))


def reference_normalized(rgb8, mean, std):
    """ToTensor + Normalize in float32 as torch computes them: x / 255, then (x - mean) / std, with mean and
    std rounded to float32 first (torch.tensor of Python floats). (3, S, S) float32."""
    x = np.transpose(rgb8, (2, 0, 1)).astype(np.float32) / np.float32(255)
    m = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)
    return ((x - m) / s).astype(np.float32)


def load_rgb(path):
    """timm's loader: PIL Image.open(f).convert('RGB')."""
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


# ---- synthetic images -------------------------------------------------------------------------------------


def make_pixels(kind, w, h, seed):
    """(h, w, 3) uint8 content: smooth waves, uniform noise, hard edges, or smooth left | noise right."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    if kind == "smooth":
        r = 128 + 110 * np.sin(x / 5.3 + y / 9.1)
        g = 255 * x / max(w - 1, 1)
        b = 128 + 100 * np.cos(y / 4.7) * np.sin(x / 13.0)
        a = np.stack([r, g, b], -1)
    elif kind == "noise":
        a = rng.integers(0, 256, size=(h, w, 3))
    elif kind == "edges":
        checker = ((x // 3 + y // 2) % 2) * 255
        stripes = ((x // 5) % 2) * 255
        a = np.stack([checker, stripes, 255 - checker], -1)
    elif kind == "mix":
        smooth = make_pixels("smooth", w, h, seed).astype(np.float64)
        noise = rng.integers(0, 256, size=(h, w, 3))
        a = np.where((x >= w // 2)[..., None], noise, smooth)
    else:
        raise ValueError(kind)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def make_image(kind, w, h, mode, seed):
    """A PIL image of the given mode built from make_pixels (the alpha, palette and 16-bit variants too)."""
    px = make_pixels(kind, w, h, seed)
    rng = np.random.default_rng(seed + 1000)
    if mode == "RGB":
        return Image.fromarray(px, "RGB")
    if mode == "L":
        return Image.fromarray(px[..., 0], "L")
    if mode == "LA":
        alpha = rng.integers(0, 256, size=(h, w), dtype=np.uint8)
        return Image.fromarray(np.stack([px[..., 0], alpha], -1), "LA")
    if mode == "RGBA":
        alpha = rng.integers(0, 256, size=(h, w), dtype=np.uint8)
        alpha[::3, ::2] = 0  # fully transparent pixels keep their colour in convert("RGB")
        return Image.fromarray(np.concatenate([px, alpha[..., None]], -1), "RGBA")
    if mode == "P":
        idx = (px[..., 0] // 4).astype(np.uint8)  # 64 palette entries
        im = Image.fromarray(idx, "P")
        im.putpalette(rng.integers(0, 256, size=64 * 3, dtype=np.uint8).tobytes())
        return im
    if mode == "I;16":
        # 0..1023: PIL clips to 255 converting to RGB, where a high-byte reduction would give 0..3
        v = (px[..., 0].astype(np.uint16) * 4 + px[..., 1].astype(np.uint16) % 4).astype(np.uint16)
        im = Image.fromarray(v)  # uint16 -> mode I;16
        assert im.mode == "I;16", im.mode
        return im
    raise ValueError(mode)


def save_png(im, path):
    im.save(path, format="PNG", optimize=False, compress_level=9)


# ---- the C driver -----------------------------------------------------------------------------------------

DRIVER_C = r"""
/* Runs tprof's preprocessing for each job line on stdin:
 *   path <TAB> S <TAB> crop_pct <TAB> interpolation <TAB> crop_mode <TAB> m0 m1 m2 <TAB> s0 s1 s2 <TAB> out
 *   <TAB> pillow_version
 * writing out.rgb (S*S*3 bytes, tp_image_load_rgb8) and out.f32 (3*S*S float32, tp_image_load); one line
 * "ok" or "ERR <message>" per job on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/image.h"

static int dump(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t k = fwrite(p, 1, n, f);
    return fclose(f) == 0 && k == n;
}

int main(void) {
    char line[8192];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char *f[9];
        int n = 0;
        for (char *tok = strtok(line, "\t"); tok && n < 9; tok = strtok(NULL, "\t")) f[n++] = tok;
        if (n != 9) { printf("ERR bad job line\n"); fflush(stdout); continue; }
        tp_preprocess pp = {0};
        pp.img_size = atoi(f[1]);
        pp.crop_pct = strtod(f[2], NULL);
        pp.interpolation = (tp_interp)tp_interp_parse(f[3]);
        pp.crop_mode = (tp_crop_mode)tp_crop_mode_parse(f[4]);
        pp.pillow_version = atoi(f[8]);
        double m[3], s[3];
        if (sscanf(f[5], "%lf %lf %lf", &m[0], &m[1], &m[2]) != 3 ||
            sscanf(f[6], "%lf %lf %lf", &s[0], &s[1], &s[2]) != 3) {
            printf("ERR bad mean/std\n"); fflush(stdout); continue;
        }
        for (int c = 0; c < 3; c++) pp.mean[c] = (float)m[c], pp.std[c] = (float)s[c]; /* as torch.tensor(double) */
        size_t S = (size_t)(pp.img_size > 0 ? pp.img_size : 1);
        unsigned char *rgb = malloc(S * S * 3);
        float *x = malloc(S * S * 3 * sizeof *x);
        tp_error err = {0};
        char out[8192];
        tp_status st = tp_image_load_rgb8(f[0], &pp, rgb, &err);
        if (st == TP_OK) st = tp_image_load(f[0], &pp, x, &err);
        if (st == TP_OK) {
            snprintf(out, sizeof out, "%s.rgb", f[7]);
            int ok = dump(out, rgb, S * S * 3);
            snprintf(out, sizeof out, "%s.f32", f[7]);
            ok = ok && dump(out, x, S * S * 3 * sizeof *x);
            printf(ok ? "ok\n" : "ERR cannot write output\n");
        } else {
            printf("ERR %s\n", err.msg);
        }
        fflush(stdout);
        free(rgb);
        free(x);
    }
    return 0;
}
"""


def stb_include_dir():
    """The folder of stb_image.h: $TPROF_STB_INCLUDE, else the usual system places."""
    env = os.environ.get("TPROF_STB_INCLUDE")
    for d in ([env] if env else []) + ["/usr/include/stb", "/usr/local/include/stb", "/usr/include",
                                       "/usr/local/include"]:
        if os.path.exists(os.path.join(d, "stb_image.h")):
            return d
    sys.exit("stb_image.h not found (apt-get install libstb-dev, or set TPROF_STB_INCLUDE)")


def build_driver(tmp):
    src = os.path.join(tmp, "preprocess_driver.c")
    exe = os.path.join(tmp, "preprocess_driver")
    with open(src, "w") as f:
        f.write(DRIVER_C)
    cmd = ["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-D_POSIX_C_SOURCE=200809L",
           "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "src"), "-I" + stb_include_dir(),
           src, os.path.join(ROOT, "src/io/image.c"), os.path.join(ROOT, "src/core/status.c"), "-lm", "-o", exe]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("building the driver failed:\n" + " ".join(cmd) + "\n" + r.stderr)
    if r.stderr.strip():
        print(r.stderr.strip())
    return exe


class Driver:
    def __init__(self, exe):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, path, S, crop_pct, interp, crop_mode, mean, std, out, pillow=PIL_MAJOR):
        job = "\t".join([path, str(S), repr(float(crop_pct)), interp, crop_mode,
                         " ".join(repr(float(v)) for v in mean), " ".join(repr(float(v)) for v in std), out,
                         str(pillow)])
        self.p.stdin.write(job + "\n")
        self.p.stdin.flush()
        status = self.p.stdout.readline().strip()
        if status != "ok":
            raise RuntimeError(f"tprof failed on {path}: {status}")
        rgb = np.fromfile(out + ".rgb", dtype=np.uint8).reshape(S, S, 3)
        x = np.fromfile(out + ".f32", dtype="<f4").reshape(3, S, S)
        return rgb, x

    def close(self):
        self.p.stdin.close()
        self.p.wait()


# ---- comparison -------------------------------------------------------------------------------------------

# (name, kind, w, h, mode): awkward sizes, every content, every PNG colour type that matters
CHECK_IMAGES = [
    ("rgb_300x200_smooth", "smooth", 300, 200, "RGB"),
    ("rgb_300x200_noise", "noise", 300, 200, "RGB"),
    ("rgb_61x47_mix", "mix", 61, 47, "RGB"),
    ("rgb_47x61_edges", "edges", 47, 61, "RGB"),
    ("rgb_17x333_edges", "edges", 17, 333, "RGB"),
    ("rgb_333x17_noise", "noise", 333, 17, "RGB"),
    ("rgb_224x224_noise", "noise", 224, 224, "RGB"),
    ("rgb_640x480_mix", "mix", 640, 480, "RGB"),
    ("rgb_40x150_noise", "noise", 40, 150, "RGB"),  # vertical pass first at most sizes (Pillow 13)
    ("rgb_120x700_mix", "mix", 120, 700, "RGB"),
    ("rgb_1x1_noise", "noise", 1, 1, "RGB"),
    ("rgb_2x3_noise", "noise", 2, 3, "RGB"),
    ("rgb_5x4_edges", "edges", 5, 4, "RGB"),
    ("gray_61x47_mix", "mix", 61, 47, "L"),
    ("gray16_23x29_smooth", "smooth", 23, 29, "I;16"),
    ("la_33x29_noise", "noise", 33, 29, "LA"),
    ("rgba_31x19_mix", "mix", 31, 19, "RGBA"),
    ("p_25x25_noise", "noise", 25, 25, "P"),
]
CHECK_PARAMS = [(224, 0.875), (224, 0.9), (32, 1.0), (32, 0.9), (24, 1.15), (16, 0.95), (7, 0.5)]
CHECK_NORMS = [(IMAGENET_MEAN, IMAGENET_STD), ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]


def ulp_diff(a, b):
    """|a - b| in float32 ulps (ordered bit patterns), elementwise."""
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def compare(driver, tmp):
    paths = {}
    for i, (name, kind, w, h, mode) in enumerate(CHECK_IMAGES):
        p = os.path.join(tmp, name + ".png")
        save_png(make_image(kind, w, h, mode, seed=100 + i), p)
        assert Image.open(p).mode == mode, (name, Image.open(p).mode)
        paths[name] = p
    stats = {}
    worst = []
    n_cases = 0
    for name, kind, w, h, mode in CHECK_IMAGES:
        img = load_rgb(paths[name])
        for S, crop in CHECK_PARAMS:
            for interp in PIL_FILTERS:
                for crop_mode in ("center", "squash"):
                    for k, (mean, std) in enumerate(CHECK_NORMS):
                        if k and (S, crop) != (32, 0.9):
                            continue  # the second mean/std only where it costs nothing
                        ref8 = reference_rgb8(img, S, crop, interp, crop_mode)
                        refx = reference_normalized(ref8, mean, std)
                        got8, gotx = driver.run(paths[name], S, crop, interp, crop_mode, mean, std,
                                                os.path.join(tmp, "out"))
                        n_cases += 1
                        sc = scale_size(S, crop)
                        nw, nh = resized_size(w, h, sc, crop_mode)
                        order = pass_order(w, h, nw, nh, PIL_MAJOR) if interp != "nearest" else "-"
                        key = (interp, order)
                        st = stats.setdefault(key, dict(cases=0, values=0, diff=0, maxdiff=0, fbits=0, maxulp=0))
                        d = np.abs(got8.astype(int) - ref8.astype(int))
                        u = ulp_diff(gotx, refx)
                        st["cases"] += 1
                        st["values"] += d.size
                        st["diff"] += int((d != 0).sum())
                        st["maxdiff"] = max(st["maxdiff"], int(d.max()))
                        st["fbits"] += int((u != 0).sum())
                        st["maxulp"] = max(st["maxulp"], int(u.max()))
                        if d.max() or u.max():
                            worst.append((int(d.max()), int((d != 0).sum()), name, S, crop, interp, crop_mode))
    print(f"{n_cases} cases, {len(CHECK_IMAGES)} images ({', '.join(sorted({m for *_, m in CHECK_IMAGES}))}), "
          f"Pillow {Image.__version__}, numpy {np.__version__}")
    print(f"{'filter':9} {'order':7} {'cases':>6} {'8-bit values':>13} {'differ':>7} {'max |d|':>8} "
          f"{'fp32 not bit-equal':>19} {'max ulp':>8}")
    for (interp, order), st in sorted(stats.items()):
        print(f"{interp:9} {order:7} {st['cases']:6} {st['values']:13} {st['diff']:7} {st['maxdiff']:8} "
              f"{st['fbits']:19} {st['maxulp'] if st['maxulp'] < 10**6 else '>1e6':>8}")
    if worst:
        print("cases that differ (max |d|, count, image, S, crop_pct, filter, crop_mode):")
        for w_ in sorted(worst, reverse=True)[:20]:
            print("  ", w_)
    return not worst


# ---- fixtures for tests/test_image_stats.c ----------------------------------------------------------------

# Source images committed under tests/fixtures/ (name -> kind, w, h, mode, seed). preprocess_timm_a/b are
# also the images tools/make_timm_golden.py runs timm's transform on.
FIXTURE_IMAGES = {
    "preprocess_timm_a.png": ("mix", 61, 47, "RGB", 1),
    "preprocess_timm_b.png": ("mix", 40, 73, "RGB", 2),
    "preprocess_tall_noise.png": ("noise", 40, 150, "RGB", 3),
    "preprocess_gray_edges.png": ("edges", 17, 60, "L", 4),
    "preprocess_gray16.png": ("smooth", 23, 29, "I;16", 5),
    "preprocess_rgba.png": ("mix", 31, 19, "RGBA", 6),
    "preprocess_palette.png": ("noise", 25, 25, "P", 7),
    "preprocess_tiny.png": ("edges", 5, 4, "RGB", 8),
    "preprocess_wide.png": ("noise", 90, 20, "RGB", 9),
    "preprocess_big_noise.png": ("noise", 120, 90, "RGB", 10),
}

# (source, S, crop_pct, interpolation, crop_mode, write the normalized ImageNet fp32 too)
FIXTURE_CASES = [
    ("preprocess_timm_a.png", 32, 0.9, "bicubic", "center", True),   # tests/fixtures/timm_in1k_crop090
    ("preprocess_timm_b.png", 32, 0.9, "bicubic", "center", True),
    ("preprocess_timm_a.png", 32, 1.0, "bilinear", "center", False),  # tests/fixtures/timm_crop100
    ("preprocess_timm_b.png", 32, 1.0, "bilinear", "center", False),
    ("preprocess_timm_a.png", 32, 0.9, "nearest", "center", False),
    ("preprocess_timm_b.png", 32, 0.9, "nearest", "squash", False),
    ("preprocess_timm_b.png", 32, 0.9, "bicubic", "squash", False),
    ("preprocess_timm_a.png", 24, 1.15, "bilinear", "squash", False),  # squash then zero padding
    ("preprocess_timm_a.png", 24, 1.15, "bicubic", "center", False),   # padding on one side only
    ("preprocess_tall_noise.png", 16, 1.0, "bicubic", "center", False),  # vertical pass first (Pillow 13)
    ("preprocess_tall_noise.png", 16, 0.875, "bilinear", "center", False),  # vertical pass first
    ("preprocess_gray_edges.png", 16, 0.875, "bicubic", "center", False),
    ("preprocess_gray16.png", 16, 0.9, "bicubic", "center", False),
    ("preprocess_rgba.png", 16, 1.0, "bilinear", "center", False),
    ("preprocess_palette.png", 20, 0.95, "bicubic", "center", False),
    ("preprocess_tiny.png", 32, 0.9, "bicubic", "center", False),  # 8x upsampling: overshoot clamped
    ("preprocess_wide.png", 16, 1.0, "bicubic", "center", False),
    ("preprocess_big_noise.png", 16, 0.875, "bicubic", "center", False),  # 5.6x down: wide kernels
    ("preprocess_big_noise.png", 16, 0.875, "bilinear", "squash", False),
]


# The cases whose result depends on the pass order (vertical first in Pillow 13), plus a control that does
# not; written with Pillow <= 12 into preprocess_cases_pil12.txt.
FIXTURE_CASES_PIL12 = [
    ("preprocess_timm_b.png", 32, 0.9, "bicubic", "squash", False),
    ("preprocess_tall_noise.png", 16, 1.0, "bicubic", "center", False),
    ("preprocess_tall_noise.png", 16, 0.875, "bilinear", "center", False),
    ("preprocess_timm_a.png", 32, 0.9, "bicubic", "center", False),  # control: horizontal first in both
]

MANIFEST_HEADER = [
    "# Golden cases for tests/test_image_stats.c, written by tools/check_preprocess_pil.py --write-fixtures",
    "# with Pillow {pil}, numpy {np}: the timm/torchvision eval transform of the source PNG, emulated with PIL",
    "# (reference_rgb8). Columns: source S crop_pct interpolation crop_mode expected (the uint8 S x S RGB crop",
    "# as a PNG) normalized (its float32 (3, S, S) little-endian normalization with ImageNet mean/std, or -)",
    "# order (the order of Pillow's two resampling passes here: hfirst, vfirst, - for none) pillow (the major",
    "# version of the Pillow that wrote the case: tp_preprocess.pillow_version to reproduce it).",
]


def write_fixtures(outdir):
    os.makedirs(outdir, exist_ok=True)
    if PIL_MAJOR >= 13:
        cases, manifest, prefix = FIXTURE_CASES, "preprocess_cases.txt", "preprocess_expect_"
        for name, (kind, w, h, mode, seed) in FIXTURE_IMAGES.items():
            save_png(make_image(kind, w, h, mode, seed=seed), os.path.join(outdir, name))
    else:
        cases, manifest, prefix = FIXTURE_CASES_PIL12, "preprocess_cases_pil12.txt", "preprocess_expect_pil12_"
        for name, (kind, w, h, mode, seed) in FIXTURE_IMAGES.items():  # read, never rewritten by an old Pillow
            want = np.asarray(make_image(kind, w, h, mode, seed=seed).convert("RGB"))
            if not np.array_equal(np.asarray(load_rgb(os.path.join(outdir, name))), want):
                sys.exit(f"{name} is missing or differs: write the fixtures with Pillow >= 13 first")
    lines = [l.format(pil=Image.__version__, np=np.__version__) for l in MANIFEST_HEADER]
    for i, (src, S, crop, interp, crop_mode, norm) in enumerate(cases):
        img = load_rgb(os.path.join(outdir, src))
        ref8 = reference_rgb8(img, S, crop, interp, crop_mode)
        exp = f"{prefix}{i:02d}.png"
        save_png(Image.fromarray(ref8, "RGB"), os.path.join(outdir, exp))
        nrm = "-"
        if norm:
            nrm = f"{prefix}{i:02d}.f32"
            reference_normalized(ref8, IMAGENET_MEAN, IMAGENET_STD).astype("<f4").tofile(os.path.join(outdir, nrm))
        w, h = img.size
        nw, nh = resized_size(w, h, scale_size(S, crop), crop_mode)
        order = "-" if interp == "nearest" or (nw, nh) == (w, h) else pass_order(w, h, nw, nh, PIL_MAJOR)
        lines.append(f"{src} {S} {crop!r} {interp} {crop_mode} {exp} {nrm} {order} {PIL_MAJOR}")
    with open(os.path.join(outdir, manifest), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(outdir, n)) for n in os.listdir(outdir) if n.startswith("preprocess_"))
    print(f"wrote {manifest} ({len(cases)} cases) with Pillow {Image.__version__} to {outdir} ({total} bytes of "
          f"preprocess_* files in all)")


def check_fixtures(driver, outdir, tmp):
    """The committed fixture cases, through the C code, each with the pillow_version of its manifest line:
    they must agree exactly too."""
    bad = 0
    for manifest in ("preprocess_cases.txt", "preprocess_cases_pil12.txt"):
        path = os.path.join(outdir, manifest)
        if not os.path.exists(path):
            print(f"  ({manifest} absent)")
            continue
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                src, S, crop, interp, crop_mode, exp, nrm, order, pil = line.split()
                S, crop, pil = int(S), float(crop), int(pil)
                got8, gotx = driver.run(os.path.join(outdir, src), S, crop, interp, crop_mode, IMAGENET_MEAN,
                                        IMAGENET_STD, os.path.join(tmp, "fx"), pillow=pil)
                ref8 = np.asarray(Image.open(os.path.join(outdir, exp)).convert("RGB"))
                nd = int((got8 != ref8).sum())
                nu = 0
                if nrm != "-":
                    refx = np.fromfile(os.path.join(outdir, nrm), dtype="<f4").reshape(3, S, S)
                    nu = int((ulp_diff(gotx, refx) != 0).sum())
                bad += nd + nu
                print(f"  Pillow {pil:2} {src:28} S {S:3} crop {crop:<5} {interp:8} {crop_mode:6} {order:6}: "
                      f"{nd} differing 8-bit values" + (f", {nu} fp32 values not bit-equal" if nrm != "-" else ""))
    return bad == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-fixtures", action="store_true", help="(re)write tests/fixtures/preprocess_*")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures"), help="fixture directory")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tprof_pil_check_")
    try:
        driver = Driver(build_driver(tmp))
        ok = compare(driver, tmp)
        if args.write_fixtures:
            write_fixtures(args.fixtures)
        if os.path.exists(os.path.join(args.fixtures, "preprocess_cases.txt")):
            print("fixture cases through tprof:")
            ok = check_fixtures(driver, args.fixtures, tmp) and ok
        driver.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK: identical to Pillow" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
