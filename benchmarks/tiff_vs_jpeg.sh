#!/usr/bin/env bash
# 16-bit tiled TIFFs beside JPEGs of the same pixels: the app's photo-like JPEGs (data.source_size=1024, about
# 1 MP, 192 of them), each also written as a uint16 RGB TIFF (its values × 257, 256² tiles, ZSTD), read by
# `bench` (modes loader and loader_steps, 224² out, augment=default, 2 workers): the JPEG folder as 8-bit RGB,
# the TIFF folder with data.dtype=uint16 (6 bytes a pixel through the ring). The two folders alternate, twice each.
# Usage: benchmarks/tiff_vs_jpeg.sh [extra bench overrides...]   (about 4 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=outputs/tiff-bench/$(date +%Y-%m-%d_%H-%M-%S)
mkdir -p "$out"
cat >"$out/make_folders.py" <<'PY'
import sys
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

from app.data.synthetic import synthetic_source
from app.schema import SyntheticDataConfig

if __name__ == "__main__":  # the generator's worker processes import this file again (spawn)
    out = Path(sys.argv[1])
    source = synthetic_source(SyntheticDataConfig(source_size=1024, num_images=192, num_test_images=0))
    for kind in ("jpeg", "tiff"):
        for split in (source.train, source.val):
            for path, label in zip(split.paths, split.labels, strict=True):
                folder = out / kind / source.class_names[int(label)]
                folder.mkdir(parents=True, exist_ok=True)
                if kind == "jpeg":
                    (folder / Path(path).name).symlink_to(Path(path).absolute())
                    continue
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB")).astype(np.uint16) * 257
                tifffile.imwrite(folder / f"{Path(path).stem}.tif", pixels, photometric="rgb", tile=(256, 256),
                                 compression="zstd")
    print(f"{len(source.train) + len(source.val)} images in {out}/jpeg and {out}/tiff")
PY
"$py" "$out/make_folders.py" "$out"
du -shL "$out/jpeg" "$out/tiff"
common=("bench.modes=[loader,loader_steps]" "data.image_size=[224,224]" data.batch_size=32 queue.workers=2 "$@")
for round in 1 2; do
  for kind in jpeg tiff; do
    extra=(); [ "$kind" = tiff ] && extra=(data.dtype=uint16)
    echo "== round $round: $kind"
    "$py" -m app bench data=folder "data.path=$out/$kind" "${extra[@]}" "${common[@]}" \
      "hydra.run.dir=$out/bench-$kind-$round" 2>/dev/null | grep -E "^\| (loader|loader_steps) "
  done
done
