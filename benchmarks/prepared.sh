#!/usr/bin/env bash
# What a prepared copy saves on full-size photos, side by side in one bench run: photo-like JPEGs
# of about 12 MP (the app's generator at data.source_size=3464: 7-18 MP, 1:1 to 16:9), 512² out,
# RandomResizedCrop(scale 0.5-1) + flip + brightness/contrast (augment=default), 2 workers:
#   1. `prepare` writes the copy (prepare.short_side=auto: 837 px) under $out/copy; its summary
#      line gives its time and sizes;
#   2. a local S3 endpoint (moto's server, in its own process on 127.0.0.1) gets the same copy;
#   3. one `bench` run: `loader` (the loader alone) and `loader_steps` (through train's step loop)
#      on the originals, the local copy and the copy on the S3 endpoint, by byte ranges and
#      through a shard cache (bench.cache_dir: filled by the first mode, read by the second).
# Usage: benchmarks/prepared.sh [extra bench overrides...]   (about 3 minutes on 2 cores, once the originals exist)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=outputs/prepared-bench/$(date +%Y-%m-%d_%H-%M-%S)
data=(data.source_size=3464 data.num_images=192 data.num_test_images=16 "data.image_size=[512,512]"
      data.batch_size=16 queue.workers=2)
mkdir -p "$out"
echo "== prepare (the 12 MP originals are generated first where they are not yet)"
"$py" -m app prepare "${data[@]}" "prepare.out=$out/copy" "hydra.run.dir=$out/prepare" 2>/dev/null | tail -1

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$py" -m moto.server -H 127.0.0.1 -p "$port" >"$out/s3-endpoint.log" 2>&1 &
endpoint_pid=$!
trap 'kill $endpoint_pid' EXIT
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench \
       AWS_DEFAULT_REGION=us-east-1
"$py" - "$out/copy" <<'PY'
import sys, time
import s3fs
fs = s3fs.S3FileSystem()
deadline = time.monotonic() + 30
while True:  # the endpoint's process takes a moment to listen
    try:
        fs.mkdir("bench")
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
fs.put(sys.argv[1] + "/", "bench/copy", recursive=True)
print("copied to s3://bench/copy:", len(fs.ls("bench/copy")), "objects")
PY

echo "== bench: originals, the local copy, the copy on the S3 endpoint"
"$py" -m app bench "${data[@]}" 'bench.modes=[loader,loader_steps]' bench.memory=false bench.batches=40 \
  "bench.prepared=[$out/copy,s3://bench/copy]" "bench.cache_dir=$out/cache" "hydra.run.dir=$out/bench" "$@" \
  2>/dev/null | grep -v '^written'
echo "bench.json: $out/bench/bench.json"
