"""docs/library.md's script (its model, compile and fit) fed three ways, side by side, each in a
fresh process: `loader` (app.library.ImageLoader: worker processes, uint8 batches, the float32
boundary on the device) and a well-written keras.utils.PyDataset (app/bench/keras_baseline.py:
the textbook decode, the same albumentations Compose reseeded a sample, float32 batches) with
Keras's workers as threads (`pydataset_threads`) and as processes (`pydataset_processes`).
The same workers, queue size, batch and Compose everywhere: RandomResizedCrop(scale 0.5–1) +
flip + brightness/contrast, as augment=default. Photo-like JPEGs of the app's generator (v2), at
`--source-size` (1024: about a megapixel; 3464: 7–18 MP, full-size photos).

images/s over the second and third epochs (the first holds start-up and compilation), each of
`--steps` batches (at most the folder's).

Usage: .venv/bin/python benchmarks/library.py [--source-size 1024 3464] [--images 800 192] [--size 128]
       [--batch 16] [--workers 2] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import albumentations as A
import keras
import numpy as np

from app.augment import Augmenter
from app.bench.keras_baseline import KerasBaseline
from app.data.sources.folder import folder_source
from app.data.sources.synthetic import Spec, ensure_dataset
from app.library import ImageLoader

ROOT = Path(__file__).resolve().parent.parent
MODES = ("loader", "pydataset_threads", "pydataset_processes")
EPOCHS = 3


def documented_model():
    """build_model and SIZE of docs/library.md's script, as the page shows them."""
    code = re.search(r"```py\n(.*?)```", (ROOT / "docs" / "library.md").read_text(), re.S).group(1)
    namespace = {"__name__": "library_script"}
    exec(compile(code, "docs/library.md", "exec"), namespace)  # noqa: S102 - the page's own code
    return namespace


def compose(size: int) -> A.Compose:
    return A.Compose([A.RandomResizedCrop((size, size), scale=(0.5, 1.0)), A.HorizontalFlip(),
                      A.RandomBrightnessContrast()])


class EpochTimes(keras.callbacks.Callback):
    """Each epoch's duration."""

    def __init__(self):
        super().__init__()
        self.seconds, self.start = [], 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.start)


def measure(mode: str, args) -> dict:
    """One mode, in this process: the documented model fitted 3 epochs of `args.steps` batches."""
    script = documented_model()
    script["SIZE"] = (args.size, args.size)  # build_model reads it
    source = folder_source(args.folder, 0.0)
    model = script["build_model"](len(source.class_names))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    times, steps = EpochTimes(), min(args.steps, len(source.train) // args.batch)
    if mode == "loader":
        loader = ImageLoader(train=source.train, image_size=(args.size, args.size), batch_size=args.batch,
                             transforms=compose(args.size), workers=args.workers, max_size=args.workers)
        with loader:
            model.fit(loader.train, epochs=EPOCHS, steps_per_epoch=steps, shuffle=False, callbacks=[times], verbose=0)
    else:
        augmenter = Augmenter(compose(args.size), (args.size, args.size))
        order = [(epoch, i) for epoch in range(EPOCHS) for i in range(steps * args.batch)]  # each epoch's samples
        batches = [order[k:k + args.batch] for k in range(0, len(order), args.batch)]
        data = KerasBaseline(source.train, augmenter, np.array(batches), 0, workers=args.workers,
                             use_multiprocessing=mode == "pydataset_processes", max_queue_size=args.workers)
        model.fit(data, epochs=EPOCHS, steps_per_epoch=steps, shuffle=False, callbacks=[times], verbose=0)
    timed = times.seconds[1:]
    return {"mode": mode, "images_per_s": len(timed) * steps * args.batch / sum(timed),
            "first_epoch_s": times.seconds[0], "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-size", type=int, nargs="+", default=[1024, 3464])
    parser.add_argument("--size", type=int, default=128)  # the script's own SIZE
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--images", type=int, nargs="+", default=[800, 192])  # each source size's folder
    parser.add_argument("--one", choices=MODES)
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    rows = []
    for source_size, images in zip(args.source_size, args.images, strict=True):
        folder = ensure_dataset(ROOT / "datasets" / "synthetic", Spec(num_images=images, source_size=source_size,
                                                                       num_classes=4, seed=0))
        for mode in MODES:
            argv = [sys.executable, __file__, "--one", mode, "--folder", str(folder), "--size", str(args.size),
                    "--batch", str(args.batch), "--workers", str(args.workers), "--steps", str(args.steps)]
            run = subprocess.run(argv, capture_output=True, text=True, check=True)
            rows.append({"source_size": source_size, **json.loads(run.stdout.splitlines()[-1])})
            row = rows[-1]
            print(f"{source_size:>5}  {mode:<20} {row['images_per_s']:7.1f} img/s  ({row['steps']} steps an epoch)",
                  flush=True)
    for source_size in args.source_size:
        rate = {r["mode"]: r["images_per_s"] for r in rows if r["source_size"] == source_size}
        best = max(rate["pydataset_threads"], rate["pydataset_processes"])
        print(f"{source_size}: loader / best PyDataset = {rate['loader'] / best:.2f}x")


if __name__ == "__main__":
    main()
