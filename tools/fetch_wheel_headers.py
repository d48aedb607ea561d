#!/usr/bin/env python3
"""Fetches C/C++ headers tprof's CUDA build needs from NVIDIA's wheels on PyPI, into third_party/.

  python3 tools/fetch_wheel_headers.py cusparselt third_party/cusparselt
  python3 tools/fetch_wheel_headers.py cutlass third_party/cutlass

cusparselt: cuSPARSELt's header (include/cusparseLt.h) from nvidia-cusparselt-cu13 0.8.1: tprof loads the library
itself at run time (src/exec/cuda/vendor/sparse_cusparselt.h), so only the header is needed, pinned to the version
the GPU machines carry (in PyTorch's virtual environment) so the declarations match the library loaded there.
cutlass: CUTLASS's C++ headers (include/ and tools/util/include/) from nvidia-cutlass 4.2.0.0, whose wheel ships
them under cutlass_library/source/; header-only, compiled into src/exec/cuda/vendor/gemm_cutlass.cu.

The wheel's sha256 from PyPI's JSON API is checked; the wheel is kept in ~/.cache/tprof so later builds do not
download it again. Standard library only (no pip). Exits 0 when the headers are in place, 1 with a one-line reason
otherwise (the Makefile treats that as a note: the build then compiles the path that needs them as unsupported).
"""
import hashlib
import json
import os
import shutil
import sys
import urllib.parse
import urllib.request
import zipfile

# what: (PyPI package, version, the wheel's filename suffix, {member prefix in the wheel: destination under OUT})
WHEELS = {
    "cusparselt": ("nvidia-cusparselt-cu13", "0.8.1", "x86_64.whl",
                   {"nvidia/cusparselt/include/cusparseLt.h": "include/cusparseLt.h"}),
    "cutlass": ("nvidia-cutlass", "4.2.0.0", "py3-none-any.whl",
                {"cutlass_library/source/include/": "include/",
                 "cutlass_library/source/tools/util/include/": "tools/util/include/"}),
}


def fail(msg):
    print(f"fetch_wheel_headers: {msg}", file=sys.stderr)
    sys.exit(1)


def digest(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def wheel_path(package, version, suffix):
    """The wheel in ~/.cache/tprof, downloaded (and its sha256 checked) when missing."""
    url_json = f"https://pypi.org/pypi/{package}/json"
    cache = os.path.join(os.path.expanduser("~"), ".cache", "tprof")
    try:
        # the project's JSON (its per-version endpoint answered 404 for nvidia-cusparselt-cu13, 2026-11-26)
        with urllib.request.urlopen(url_json, timeout=30) as r:
            meta = json.load(r)
    except Exception as e:  # no network, PyPI down: a wheel checked when it was downloaded, else reported
        stem = package.replace("-", "_") + "-" + version + "-"
        cached = sorted(f for f in (os.listdir(cache) if os.path.isdir(cache) else [])
                        if f.startswith(stem) and f.endswith(suffix))
        if cached:
            return os.path.join(cache, cached[0])
        fail(f"PyPI's JSON for {package}: {e}")
    wheels = [u for u in meta.get("releases", {}).get(version, []) if u.get("filename", "").endswith(suffix)]
    if not wheels:
        fail(f"no {suffix} wheel of {package}=={version} on PyPI")
    w = wheels[0]
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, w["filename"])
    want = w.get("digests", {}).get("sha256")
    if os.path.exists(path) and (not want or digest(path) == want):
        return path
    tmp = path + ".part"
    try:
        url = urllib.parse.urljoin(url_json, w["url"])  # a mirror may answer with relative URLs
        with urllib.request.urlopen(url, timeout=120) as r, open(tmp, "wb") as f:
            for b in iter(lambda: r.read(1 << 20), b""):
                f.write(b)
    except Exception as e:
        fail(f"downloading {w['filename']}: {e}")
    if want and digest(tmp) != want:
        os.remove(tmp)
        fail(f"{w['filename']}: sha256 differs from PyPI's")
    os.replace(tmp, path)
    return path


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in WHEELS:
        fail(f"usage: fetch_wheel_headers.py {{{'|'.join(WHEELS)}}} OUT_DIR")
    package, version, suffix, members = WHEELS[sys.argv[1]]
    out = sys.argv[2]
    path = wheel_path(package, version, suffix)
    stage = out + ".part"  # written whole, then moved: an interrupted run leaves no half tree behind
    shutil.rmtree(stage, ignore_errors=True)
    n = 0
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if ".." in name.split("/") or name.startswith("/"):  # nothing may land outside OUT_DIR
                continue
            for prefix, dest in members.items():
                if name.startswith(prefix) and not name.endswith("/"):
                    target = os.path.join(stage, dest + name[len(prefix):]) if prefix.endswith("/") else \
                        os.path.join(stage, dest)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with open(target, "wb") as f:
                        f.write(z.read(name))
                    n += 1
    if n == 0:
        shutil.rmtree(stage, ignore_errors=True)
        fail(f"{os.path.basename(path)}: none of {', '.join(members)} inside")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    os.replace(stage, out)
    print(f"fetch_wheel_headers: {n} files of {os.path.basename(path)} in {out}")


if __name__ == "__main__":
    main()
