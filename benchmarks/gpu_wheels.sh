#!/usr/bin/env bash
# The wheels the GPU machine's image lacks for `trainer.backend=jax`, for x86-64 CPython 3.12, into
# an ignored folder: what this project's `.[jax]` install needs, read from this environment's
# package metadata (the same versions as here), less what the image has
# (benchmarks/gpu_image_packages.txt), and this project itself. Checks they sum to under 60 MiB
# (what the machine can be sent, the checkout included, is 64 MiB) and prints the line that
# installs them there beside the image's own JAX, on PYTHONPATH.
# Usage: benchmarks/gpu_wheels.sh [folder]   (.whl unless given; needs the package index)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${1:-.whl}
limit_mib=60
rm -rf "$out" && mkdir -p "$out"

# name==version of each distribution to carry, one a line (the project itself excluded)
mapfile -t wanted < <("$py" benchmarks/gpu_wheels.py benchmarks/gpu_image_packages.txt)
echo "carrying ${#wanted[@]} distributions and this project: ${wanted[*]}"
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
for spec in "${wanted[@]}"; do
  if ! "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
       --abi cp312 --abi abi3 --abi none "${platforms[@]}" -d "$out" "$spec" 2>/dev/null; then
    # published as source only (antlr4-python3-runtime 4.9.3, which hydra-core pins): a pure-Python wheel built here
    "$py" -m pip wheel -q --no-deps -w "$out" "$spec"
  fi
done
"$py" -m pip wheel -q --no-deps -w "$out" .  # this project

total=$(du -cb "$out"/*.whl | tail -1 | cut -f1)
mib=$((total / 1048576))
echo "$(ls "$out"/*.whl | wc -l) wheels, $mib MiB (limit $limit_mib MiB)"
if ((total >= limit_mib * 1048576)); then
  echo "error: the wheels come to $mib MiB, over $limit_mib MiB: more than the machine can be sent with the checkout" >&2
  exit 1
fi
echo "install there (the image's JAX and the rest untouched):"
echo "  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $out/*.whl && export PYTHONPATH=/tmp/site"
