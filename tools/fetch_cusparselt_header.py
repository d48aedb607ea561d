#!/usr/bin/env python3
"""Fetches cuSPARSELt's header (cusparseLt.h) for tprof's build from PyPI's nvidia-cusparselt-cu13 wheel.

tprof loads the library itself at run time (src/exec/cuda/vendor/sparse_cusparselt.h); only the header is needed
to build. The version is pinned to the one the GPU machines carry (0.8.1, in PyTorch's virtual environment), so the
declarations match the library loaded there. The wheel's sha256 from PyPI's JSON API is checked; the wheel is kept
in ~/.cache/tprof so later builds do not download it again. Standard library only (no pip).

  python3 tools/fetch_cusparselt_header.py third_party/cusparselt/include/cusparseLt.h

Exits 0 when the header is in place, 1 with a one-line reason otherwise (the Makefile treats that as a note:
the build then compiles the sparse path as unsupported).
"""
import hashlib
import json
import os
import sys
import urllib.parse
import urllib.request
import zipfile

PACKAGE, VERSION = "nvidia-cusparselt-cu13", "0.8.1"
JSON_URL = f"https://pypi.org/pypi/{PACKAGE}/json"


def fail(msg):
    print(f"fetch_cusparselt_header: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: fetch_cusparselt_header.py OUT_HEADER")
    out = sys.argv[1]
    try:
        # the project's JSON (its per-version endpoint answered 404 for this package, 2026-11-26)
        with urllib.request.urlopen(JSON_URL, timeout=30) as r:
            meta = json.load(r)
    except Exception as e:  # no network, PyPI down: reported, not fatal for the build
        fail(f"PyPI's JSON for {PACKAGE}: {e}")
    files = meta.get("releases", {}).get(VERSION, [])
    wheels = [u for u in files if u.get("filename", "").endswith("x86_64.whl")]
    if not wheels:
        fail(f"no x86_64 wheel of {PACKAGE}=={VERSION} on PyPI")
    w = wheels[0]
    cache = os.path.join(os.path.expanduser("~"), ".cache", "tprof")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, w["filename"])
    want = w.get("digests", {}).get("sha256")

    def digest(p):
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""):
                h.update(b)
        return h.hexdigest()

    if not (os.path.exists(path) and (not want or digest(path) == want)):
        tmp = path + ".part"
        try:
            url = urllib.parse.urljoin(JSON_URL, w["url"])  # a mirror may answer with relative URLs
            with urllib.request.urlopen(url, timeout=120) as r, open(tmp, "wb") as f:
                for b in iter(lambda: r.read(1 << 20), b""):
                    f.write(b)
        except Exception as e:
            fail(f"downloading {w['filename']}: {e}")
        if want and digest(tmp) != want:
            os.remove(tmp)
            fail(f"{w['filename']}: sha256 differs from PyPI's")
        os.replace(tmp, path)
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("include/cusparseLt.h")]
        if not names:
            fail(f"{w['filename']}: no include/cusparseLt.h inside")
        data = z.read(names[0])
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)
    print(f"fetch_cusparselt_header: {out} from {w['filename']} ({names[0]})")


if __name__ == "__main__":
    main()
