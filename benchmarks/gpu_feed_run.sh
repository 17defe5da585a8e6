#!/usr/bin/env bash
# Issue 60's measurement on a lent GPU machine (an H100 or H200 with 16 cores), as one call of about four to five
# minutes (under six): bench_gpu_feed.py's decode, loader and train sections with the JPEG engines decoding
# (nvImageCodec's hardware backend, falling back image by image), for 4, 8 and 16 workers, webdataset's rows
# beside; a fixed split (0.25) and split="auto" rows; each row's CPU cores and where the thread preparing batches
# spent its time.  Here, with the network, first:
#
#     bash benchmarks/gpu_feed_wheels.sh        # the wheels the machine lacks, into .whl/
#
# then there, from the checkout with .whl/ carried along (the device tool's `carry: [".whl"]`):
#
#     bash benchmarks/gpu_feed_run.sh           # the tables on stdout, the JSON in $OUT/gpu_feed.json
#
# Extra arguments go to bench_gpu_feed.py (``--rows train --models resnet18``, say, for a shorter run).
set -euo pipefail
out=${OUT:-/tmp}
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
echo "cores: $(nproc)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
exec timeout 345 python3 benchmarks/bench_gpu_feed.py --rows decode,loader,train --workers 4,8,16 \
    --models resnet18,resnet50 --systems webdataset,wds-gpu,wds-gpu-split --split 0.25,auto \
    --decoder nvimgcodec-hw --json "$out/gpu_feed.json" "$@"
