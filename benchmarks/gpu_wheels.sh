#!/usr/bin/env bash
# The wheels the GPU machine's image lacks for `trainer.backend=jax`, for x86-64 CPython 3.12, into
# an ignored folder: what this project's `.[jax]` install needs, read from this environment's
# package metadata (the same versions as here), less what the image has
# (benchmarks/gpu_image_packages.txt), and this project itself. Checks they sum to under 60 MiB
# (what the machine can be sent, the checkout included, is 64 MiB) and prints the line that
# installs them there beside the image's own JAX, on PYTHONPATH.
# Usage: benchmarks/gpu_wheels.sh [--dry-run] [folder]   (.whl unless given; needs the package index)
#   --dry-run: then, here, a CPython 3.12 venv with only the image's share of what the app needs (from
#              the package index: JAX's CPU build, numpy, Pillow, OpenCV, psutil, matplotlib,
#              tensorboard, PyYAML, ...), the wheels installed as the printed line says, and
#              `benchmarks/gpu_check.sh --quick` run on them (outputs/gpu_wheels_dry_run/; PYTHON312
#              names the interpreter where python3.12 is not on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
dry_run=0
if [[ ${1:-} == --dry-run ]]; then dry_run=1; shift; fi
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

((dry_run)) || exit 0
here=outputs/gpu_wheels_dry_run
rm -rf "$here" && mkdir -p "$here"
py312=${PYTHON312:-python3.12}  # the GPU image's Python
"$py312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null ||
  { echo "error: --dry-run needs CPython 3.12: put python3.12 on PATH or set PYTHON312" >&2; exit 1; }
"$py312" -m venv "$here/venv"
mapfile -t share < <("$py" benchmarks/gpu_wheels.py benchmarks/gpu_image_packages.txt --image-share)
echo "the image's share, from the package index: ${share[*]}"
"$here/venv/bin/python" -m pip install -q "${share[@]}"
"$here/venv/bin/python" -m pip install -q --no-index --no-deps --no-compile --target "$here/site" "$out"/*.whl
! PYTHONPATH="$here/site" "$here/venv/bin/python" -c "import tensorflow" 2>/dev/null || { echo "error: TensorFlow is there" >&2; exit 1; }
PYTHONPATH="$here/site" PYTHON="$here/venv/bin/python" bash benchmarks/gpu_check.sh --quick
