"""JPEG decoders compared on the same bytes: Pillow, simplejpeg, PyTurboJPEG, OpenCV (those installed).

Photo-like 500x375 JPEGs (ImageNet-sized, quality 90, 4:2:0), decoded to an
RGB uint8 array, best of N repeats, on one thread and on two (a library that
holds the GIL gains nothing from the second thread).  Also checks each
library's pixels against Pillow's, and times reduced-size decoding (DCT
scaling to 1/2) where the library offers it.  Libraries not installed are
listed as such; this is how the ``jpeg`` extra was chosen (see
benchmarks/README.md).

    python benchmarks/bench_jpeg_libs.py [--images 400] [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from harness import photo
from PIL import Image


def pillow_decoders():
    def full(data):
        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))

    def half(data):
        with Image.open(io.BytesIO(data)) as img:
            img.draft("RGB", (img.width // 2, img.height // 2))
            return np.asarray(img.convert("RGB"))

    return full, half


def simplejpeg_decoders():
    import simplejpeg

    def full(data):
        return simplejpeg.decode_jpeg(data, colorspace="RGB")

    def half(data):
        h, w = simplejpeg.decode_jpeg_header(data)[:2]
        return simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=h // 2, min_width=w // 2)

    return full, half


def turbojpeg_decoders():
    from turbojpeg import TJPF_RGB, TurboJPEG

    jpeg = TurboJPEG()

    def full(data):
        return jpeg.decode(data, pixel_format=TJPF_RGB)

    def half(data):
        return jpeg.decode(data, pixel_format=TJPF_RGB, scaling_factor=(1, 2))

    return full, half


def opencv_decoders():
    import cv2

    def full(data):
        return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    def half(data):
        array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_REDUCED_COLOR_2)
        return cv2.cvtColor(array, cv2.COLOR_BGR2RGB)

    return full, half


LIBRARIES = {
    "Pillow": pillow_decoders,
    "simplejpeg": simplejpeg_decoders,
    "PyTurboJPEG": turbojpeg_decoders,
    "OpenCV": opencv_decoders,
}


def rate(fn, jpegs, threads, repeats):
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        if pool is None:
            for data in jpegs:
                fn(data)
        else:
            list(pool.map(fn, jpegs))
        best = min(best, time.perf_counter() - start)
    return len(jpegs) / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(args.images):
        out = io.BytesIO()
        Image.fromarray(photo(rng, 375, 500)).save(out, format="JPEG", quality=90)
        jpegs.append(out.getvalue())
    reference = [pillow_decoders()[0](data) for data in jpegs[:20]]
    print(f"{len(jpegs)} JPEGs of 500x375, {sum(map(len, jpegs)) / len(jpegs) / 1e3:.0f} KB on average\n")
    print("| library | version | 1 thread | 2 threads | 2 threads / 1 | 1/2 scale, 1 thread | max diff vs Pillow |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for name, make in LIBRARIES.items():
        try:
            full, half = make()
        except (ImportError, RuntimeError, OSError) as exn:
            print(f"| {name} | not available here: {type(exn).__name__}: {exn} | | | | | |")
            continue
        module = {"Pillow": "PIL", "PyTurboJPEG": "turbojpeg", "OpenCV": "cv2"}.get(name, name)
        version = getattr(__import__(module), "__version__", "?")
        diff = max(int(np.abs(full(d).astype(int) - ref).max()) for d, ref in zip(jpegs, reference))
        one, two = rate(full, jpegs, 1, args.repeats), rate(full, jpegs, 2, args.repeats)
        base = base or one
        scaled = rate(half, jpegs, 1, args.repeats)
        print(
            f"| {name} | {version} | {one:,.0f} ({one / base:.2f}x) | {two:,.0f} | {two / one:.2f}x "
            f"| {scaled:,.0f} | {diff} |"
        )


if __name__ == "__main__":
    main()
