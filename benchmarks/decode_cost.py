"""How photo-like a folder of JPEGs is: bytes a pixel, and OpenCV's full decode time a megapixel,
for two or more folders side by side in one process (timings here drift twofold within
minutes, so folders are timed in alternation, never one after the other). Timed as the
loader's workers decode: glibc keeping freed memory (app/processes.py), so the figure is the
decode's and not the page faults of a fresh output buffer (`--fresh-pages` times those too).

Usage: .venv/bin/python benchmarks/decode_cost.py FOLDER [FOLDER ...] [--files 200] [--rounds 5]
e.g. an older synthetic dataset, the current one, and a folder of camera photo crops.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np

from app.processes import keep_freed_memory


def _files(folder: Path, count: int) -> list[tuple[bytes, int]]:
    """(the file's bytes, its pixel count) for the first `count` JPEGs, read into memory."""
    found = []
    for path in sorted(folder.rglob("*.jp*g"))[:count]:
        raw = path.read_bytes()
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR_RGB)
        found.append((raw, image.shape[0] * image.shape[1]))
    if not found:
        raise SystemExit(f"no JPEG files under {folder}")
    return found


def _decode_seconds(files: list[tuple[bytes, int]]) -> float:
    start = time.perf_counter()
    for raw, _ in files:
        cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR_RGB)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--files", type=int, default=200, help="JPEGs a folder (the first, sorted by path)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds; the median counts")
    parser.add_argument("--fresh-pages", action="store_true", help="leave glibc's allocator as it is by default")
    args = parser.parse_args()
    if not args.fresh_pages:
        keep_freed_memory()
    cv2.setNumThreads(1)
    sets = {folder: _files(folder, args.files) for folder in args.folders}
    times: dict[Path, list[float]] = {folder: [] for folder in sets}
    for _ in range(args.rounds):
        for folder, files in sets.items():
            times[folder].append(_decode_seconds(files))
    first = args.folders[0]
    per_mpx = {f: float(np.median(times[f])) / (sum(p for _, p in sets[f]) / 1e6) for f in sets}
    print(f"{'folder':<60} {'files':>5} {'bytes/px':>9} {'ms/Mpx':>8} {'vs first':>9}")
    for folder, files in sets.items():
        bytes_px = sum(len(raw) for raw, _ in files) / sum(p for _, p in files)
        print(f"{str(folder)[-60:]:<60} {len(files):>5} {bytes_px:>9.3f} {per_mpx[folder] * 1e3:>8.2f} "
              f"{per_mpx[folder] / per_mpx[first]:>8.2f}×")


if __name__ == "__main__":
    main()
