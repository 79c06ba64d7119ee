"""This machine's memory figures for the plan (app/memory_plan.py), measured once by a short
probe and stored (`$APP_CACHE_DIR`, else `~/.cache/app`, as machine_probe.<backend>.json), measured
again when the machine, Keras's backend or the library versions change:

- a training process: TensorFlow, Keras and the app loaded, a tiny model trained a step (PSS);
- the activation factor: the same process's high-water mark training the small ResNet at two
  batch sizes, per float32 byte of its layers' outputs;
- a loader worker process: a real worker's PSS after small images, and how it grows with the
  largest image it decodes (after large ones).

The training process runs in a child of its own (spawned), so its figures are TensorFlow's
alone; the workers are the loader's own. Never imported by workers.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from app.io import atomic_write
from app.memory_plan import MIB, Probe

log = logging.getLogger(__name__)
CALIBRATION = {"image_size": (128, 128), "batches": (4, 32)}
SMALL, LARGE = (96, 96), (1800, 2400)  # worker probe images, H × W


def cache_file() -> Path:
    """A file a backend: the training process's figures are the backend's."""
    root = os.environ.get("APP_CACHE_DIR") or Path.home() / ".cache" / "app"
    return Path(root) / f"machine_probe.{_backend()}.json"


def machine() -> dict:
    import psutil

    from app.training.rundir import versions

    return {"host": platform.node(), "cpu_count": os.cpu_count(), "backend": _backend(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1), "versions": versions()}


def _backend() -> str:
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def measured(refresh: bool = False) -> Probe:
    """The stored probe of this machine, or a new one (about 20 s) when there is none, it was
    taken on another machine, backend or library versions, or `refresh`. The training process
    is measured on the backend this process set (KERAS_BACKEND), which its child inherits."""
    path, here = cache_file(), machine()
    if not refresh and path.is_file():
        try:
            stored = json.loads(path.read_text())
            if stored.get("machine") == here:
                return Probe(**stored)
        except (OSError, ValueError, TypeError):
            pass  # unreadable or from an older layout: measured again
    log.info("measuring this machine's memory figures once (a training process and a loader worker), "
             "stored in %s", path)
    started = time.perf_counter()
    probe = Probe(**_trainer_figures(), **_worker_figures(), machine=here)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        json.dump(probe.__dict__, f, indent=2)
    log.info("machine probe: training process %.0f MiB, worker %.0f MiB + %.2f × its largest decode, "
             "activations × %.2f (%.0f s)", probe.trainer_mib, probe.worker_mib, probe.worker_bytes_per_decoded_byte,
             probe.activation_factor, time.perf_counter() - started)
    return probe


def _trainer_figures() -> dict:
    context = mp.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_trainer_child, args=(child,), name="app-memory-probe")
    process.start()
    child.close()
    try:
        result = parent.recv() if parent.poll(timeout=600) else {"error": "the probe took over 10 minutes"}
    except EOFError:
        result = {"error": f"the probe process died (exit code {process.exitcode})"}
    process.join(timeout=60)
    if "error" in result:
        raise RuntimeError(f"memory probe of a training process failed: {result['error']}")
    return result


def _trainer_child(conn) -> None:
    """In its own process: what a training process costs before data, and the activation factor."""
    from app.frameworks import native_stderr_to_log

    try:
        with native_stderr_to_log():  # TensorFlow's start-up lines: this process has no log to keep them
            conn.send(_trainer_measures())
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{type(error).__name__}: {error}"})
    conn.close()


def _trainer_measures() -> dict:
    import resource

    import psutil

    from app.frameworks import load_keras
    from app.training import epochs, steps  # noqa: F401 - what `train` has loaded when it trains

    keras = load_keras()
    from app.model import classifier, memory_facts, small_resnet

    tiny = classifier(small_resnet((16, 16, 3), 2, widths=[4]), (16, 16))
    tiny.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    tiny.train_on_batch(np.zeros((2, 16, 16, 3), np.uint8), np.zeros(2))
    trainer_mib = psutil.Process().memory_full_info().pss / MIB
    size = CALIBRATION["image_size"]
    net = classifier(small_resnet((*size, 3), 4), size)
    net.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    marks = []
    for batch in CALIBRATION["batches"]:
        for _ in range(2):
            net.train_on_batch(np.zeros((batch, *size, 3), np.uint8), np.zeros(batch))
        marks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # Linux: KiB
    per_sample = memory_facts(net, "float32").activation_bytes_per_sample
    grown = marks[1] - marks[0]
    factor = grown / ((CALIBRATION["batches"][1] - CALIBRATION["batches"][0]) * per_sample)
    keras.backend.clear_session()
    return {"trainer_mib": trainer_mib, "activation_factor": max(factor, 0.0)}


def _worker_figures() -> dict:
    """A real loader worker's PSS after small images, then (a fresh one) after large ones."""
    from PIL import Image

    from app.augment import Augmenter
    from app.data.source import FileSplit
    from app.loader.enqueuer import Enqueuer
    from app.loader.pipeline import batches
    from app.loader.settings import Settings

    rng = np.random.default_rng(0)
    pss = {}
    with tempfile.TemporaryDirectory(prefix="app-probe-") as tmp:
        for name, (h, w) in (("small", SMALL), ("large", LARGE)):
            paths = []
            for i in range(4):
                noise = rng.integers(0, 256, (h // 4, w // 4, 3), np.uint8).repeat(4, 0).repeat(4, 1)
                paths.append(Path(tmp) / f"{name}{i}.jpg")
                Image.fromarray(noise).save(paths[-1], quality=90)
            settings = Settings(batch_size=2, image_size=(32, 32), workers=1, max_size=1)
            split = FileSplit(paths, [0] * len(paths))
            with Enqueuer({"train": split}, {"train": Augmenter([], (32, 32), draft=False)}, settings) as loader:
                for _ in batches(loader, "train", np.arange(len(paths)), 0):
                    pass
                pss[name] = _pss(loader.worker_pids[0])
    decoded = (LARGE[0] * LARGE[1] - SMALL[0] * SMALL[1]) * 3
    return {"worker_mib": pss["small"] / MIB,
            "worker_bytes_per_decoded_byte": max(pss["large"] - pss["small"], 0) / decoded}


def _pss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_full_info().pss
