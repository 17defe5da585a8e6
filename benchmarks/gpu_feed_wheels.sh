#!/usr/bin/env bash
# The wheels bench_gpu_feed.py needs on a GPU machine that has torch, torchvision, numpy, fsspec, msgpack, Pillow,
# OpenCV and PyYAML but no network (the lent H100/H200: Python 3.12, torch 2.11+cu130): wds's other dependencies,
# simplejpeg (wds's fast JPEG decoder, for the CPU rows), webdataset 1.0.2 (its rows) and nvImageCodec with nvJPEG
# for CUDA 13 (the wds-gpu-nvimgcodec rows).  Run here, in the checkout, with the network:
#
#     bash benchmarks/gpu_feed_wheels.sh            # into .whl/ (ignored by git: .git/info/exclude)
#
# and there, from the checkout with .whl/ carried along:
#
#     python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
#         PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 python3 benchmarks/bench_gpu_feed.py --json "$OUT/gpu_feed.json"
set -euo pipefail
into=${1:-.whl}
python=${PYTHON_VERSION:-3.12}
mkdir -p "$into"
grep -qxF "/$into/" .git/info/exclude 2>/dev/null || echo "/$into/" >>.git/info/exclude
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python" --implementation cp \
    "${platforms[@]}" -d "$into" \
    braceexpand==0.1.7 cbor2==6.3.0 simplejpeg==1.9.0 webdataset==1.0.2 \
    nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.0.4.44
ls -l "$into"
