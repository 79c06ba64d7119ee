"""This machine's memory figures for the plan (app/memory_plan.py), measured once by a short
probe and stored (`$APP_CACHE_DIR`, else `~/.cache/app`, as machine_probe.<backend>.json), measured
again when the machine, Keras's backend or the library versions change:

- a training process before its model: the high-water mark of its resident set (RSS) with
  TensorFlow, Keras and the app loaded, a tiny model's train and test steps fed through tf.data
  as `train` feeds them, TensorBoard's writer and a checkpoint saved; the tiny model's own
  compiled steps taken off;
- the compiled steps' cost a layer, and the activation factor: the same process's high-water
  mark training the small ResNet (train and test steps) STEPS steps at batch 4, then STEPS at
  batch 32: what batch 4 holds beyond its activations, parameters and optimizer state, a layer;
  what batch 32 adds, per float32 byte of the layers' outputs;
- a loader worker process: a real worker's private memory (USS) after small images, and how it
  grows with the largest image it decodes (after large ones).

Resident and private sizes, as app/memory.py measures a run: PSS would divide TensorFlow's
library pages with the process that started the probe when it has TensorFlow loaded (`train`
has), and the figure would be a third low. The training process runs in a child of its own
(spawned), so its figures are TensorFlow's alone; the workers are the loader's own. Its
TensorFlow start-up lines come back with its figures and go to the command's log. Never
imported by workers.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from app.frameworks import native_lines_to_log
from app.io import atomic_write
from app.memory import private_bytes
from app.memory_plan import MIB, Probe

log = logging.getLogger(__name__)
CALIBRATION = {"image_size": (128, 128), "batches": (4, 32)}
# Steps at each calibration batch size, each one's own peak (VmHWM reset before it), the median
# taken: a one-off spike of the allocator in one step moved the factor from 0.76 to 0.93 when the
# process's high-water mark was read instead.
STEPS = 5
PROCESSES = 2  # training processes measured (_trainer_figures)
SMALL, LARGE = (96, 96), (1800, 2400)  # worker probe images, H × W


def cache_file() -> Path:
    """A file a backend: the training process's figures are the backend's."""
    root = os.environ.get("APP_CACHE_DIR") or Path.home() / ".cache" / "app"
    return Path(root) / f"machine_probe.{_backend()}.json"


def machine() -> dict:
    from app.training.rundir import versions

    return {"host": platform.node(), "cpu_count": os.cpu_count(), "backend": _backend(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1), "versions": versions()}


def _backend() -> str:
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def measured(refresh: bool = False) -> Probe:
    """The stored probe of this machine, or a new one (about 30 s) when there is none, it was
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
    log.info("machine probe: training process %.0f MiB + %.2f MiB a layer, worker %.0f MiB + %.2f × its largest "
             "decode, activations × %.2f (%.0f s)", probe.trainer_mib, probe.step_mib_per_layer, probe.worker_mib,
             probe.worker_bytes_per_decoded_byte, probe.activation_factor, time.perf_counter() - started)
    return probe


def _trainer_figures() -> dict:
    """The training process's figures, from PROCESSES children: the one with the lowest activation
    factor, and the lowest base of all. A process now and then settles on ~20 % more memory a step
    for the same model (the factor 0.93 instead of 0.76 here, in about 4 processes of 10), and on a
    loaded machine one measured a base 23 % above the usual (more allocator arenas touched while
    it waited); training runs measured the lower, so the lower of two is kept, figure by figure."""
    processes = [_trainer_process() for _ in range(PROCESSES)]
    figures = min(processes, key=lambda each: each["activation_factor"])
    return {**figures, "trainer_mib": min(each["trainer_mib"] for each in processes)}


def _trainer_process() -> dict:
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
    native_lines_to_log(result.pop("stderr", ""))
    if "error" in result:
        raise RuntimeError(f"memory probe of a training process failed: {result['error']}")
    return result


def _trainer_child(conn) -> None:
    """In its own process: what a training process costs before its model, a layer's compiled
    steps and the activation factor. Its stderr (TensorFlow's native start-up lines) goes back
    with them: this process has no log file to keep them in, and the terminal must not show them."""
    from app.frameworks import native_stderr_captured

    with native_stderr_captured() as text:
        try:
            result = _trainer_measures()
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            result = {"error": f"{type(error).__name__}: {error}"}
    conn.send({**result, "stderr": "".join(text)})
    conn.close()


def _trainer_measures() -> dict:
    from app.frameworks import load_keras
    from app.training import epochs, steps  # noqa: F401 - what `train` has loaded when it trains
    from app.training.dashboards import TensorBoardWriter

    keras = load_keras()
    from app.model import classifier, memory_facts, small_resnet

    tiny = classifier(small_resnet((16, 16, 3), 2, widths=[4]), (16, 16))
    _steps(tiny, (16, 16), [2, 2])
    with tempfile.TemporaryDirectory(prefix="app-probe-") as tmp:
        writer = TensorBoardWriter(Path(tmp))
        writer.scalars("train", {"loss": 1.0}, 1)
        writer.close()
        tiny.save(Path(tmp) / "model.keras")
    with_tiny, before = _high_water(), _resident()
    size, (small, large) = CALIBRATION["image_size"], CALIBRATION["batches"]
    net = classifier(small_resnet((*size, 3), 4), size)
    marks = _steps(net, size, [small] * STEPS + [large] * STEPS)
    facts = memory_facts(net, "float32")
    settled_small, settled_large = statistics.median(marks[:STEPS]), statistics.median(marks[STEPS:])
    factor = max((settled_large - settled_small) / ((large - small) * facts.activation_bytes_per_sample), 0.0)
    held = 4 * small * size[0] * size[1] * 3 + 2 * facts.parameter_bytes + facts.optimizer_bytes
    activations = factor * small * facts.activation_bytes_per_sample
    per_layer = max(settled_small - before - held - activations, 0) / facts.layers
    tiny_layers = memory_facts(tiny, "float32").layers
    keras.backend.clear_session()
    return {"trainer_mib": (with_tiny - per_layer * tiny_layers) / MIB, "activation_factor": factor,
            "step_mib_per_layer": per_layer / MIB}


def _steps(net, size: tuple[int, int], batches: list[int]) -> list[int]:
    """`net` compiled, then a test step of the first batch size in `batches` and a train step of
    each, fed through tf.data as `train` feeds them (app/training/steps.py: one trace of each
    function, both in every mark); the high-water mark (bytes) after each train step."""
    from app.training import steps

    net.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    net.optimizer.build(net.trainable_variables)  # as `train` has it before its first step (JAX needs it)
    steps.build_metrics(net)
    net.make_train_function()
    net.make_test_function()
    test = steps.Feed([_zeros(batches[0], size)], 1).calls(net, "test")
    test()
    test.sync()  # JAX: the variables back in the model for the next function
    calls = steps.Feed([_zeros(b, size) for b in batches], len(batches)).calls(net, "train")
    marks = []
    for _ in batches:
        _reset_high_water()
        calls()
        marks.append(_high_water())
    calls.sync()
    return marks


def _zeros(batch: int, size: tuple[int, int]) -> tuple:
    return np.zeros((batch, *size, 3), np.uint8), np.zeros(batch, np.int64)


def _resident() -> int:
    return psutil.Process().memory_info().rss


def _high_water() -> int:
    """The peak resident size since the process started or `_reset_high_water` (VmHWM), in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def _reset_high_water() -> None:
    """VmHWM back to the resident size now (Linux: "5" to clear_refs), so a mark is one step's peak."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def _worker_figures() -> dict:
    """A real loader worker's USS after small images, then (a fresh one) after large ones."""
    from PIL import Image

    from app.augment import Augmenter
    from app.data.source import FileSplit
    from app.loader.enqueuer import Enqueuer
    from app.loader.pipeline import Loader
    from app.loader.settings import Settings

    rng = np.random.default_rng(0)
    uss = {}
    with tempfile.TemporaryDirectory(prefix="app-probe-") as tmp:
        for name, (h, w) in (("small", SMALL), ("large", LARGE)):
            paths = []
            for i in range(4):
                noise = rng.integers(0, 256, (h // 4, w // 4, 3), np.uint8).repeat(4, 0).repeat(4, 1)
                paths.append(Path(tmp) / f"{name}{i}.jpg")
                Image.fromarray(noise).save(paths[-1], quality=90)
            settings = Settings(batch_size=2, image_size=(32, 32), workers=1, max_size=1)
            split = FileSplit(paths, [0] * len(paths))
            enqueuer = Enqueuer({"train": split}, {"train": Augmenter([], (32, 32), draft=False)}, settings)
            with Loader(enqueuer) as loader:
                for _ in loader.batches("train", np.arange(len(paths)), 0):
                    pass
                uss[name] = private_bytes(loader.worker_pids[0])  # as app/memory.py counts a worker
    decoded = (LARGE[0] * LARGE[1] - SMALL[0] * SMALL[1]) * 3
    return {"worker_mib": uss["small"] / MIB,
            "worker_bytes_per_decoded_byte": max(uss["large"] - uss["small"], 0) / decoded}
