"""Memory figures of this machine (trainer base, compiled steps a layer, activation factor; worker USS and growth),
probed once per machine, backend and versions into `$APP_CACHE_DIR` (else ~/.cache/app)/machine_probe.<backend>.json."""

from __future__ import annotations

import importlib
import json
import logging
import multiprocessing as mp
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import tifffile
from PIL import Image

from app.augment import Augmenter
from app.capacity.memory import fork_server_bytes, private_bytes
from app.capacity.plan import MIB, Probe
from app.data.slides.patches import PatchSplit, grid_split
from app.data.source import FileSplit
from app.frameworks import native_lines_to_log, native_stderr_captured, versions
from app.io import app_cache_dir, atomic_write, held_exclusively
from app.loader.enqueuer import Enqueuer
from app.loader.pipeline import Loader
from app.loader.settings import Queue, Settings
from app.schema.data import PatchesConfig

log = logging.getLogger(__name__)
PROCESSES = 2  # training processes measured (_spawn_trainer_probes)
SMALL, LARGE = (96, 96), (1800, 2400)  # worker probe images, H × W


def cache_file() -> Path:
    """A file a backend: the training process's figures are the backend's."""
    return app_cache_dir() / f"machine_probe.{_backend()}.json"


# 2: the training process measured without JAX's GPU pool (the plan adds the pool's share); 3: forked workers;
# 4: a forked worker's region reads
PROBE_LAYOUT = 4


def machine() -> dict:
    return {"host": platform.node(), "cpu_count": os.cpu_count(), "backend": _backend(), "layout": PROBE_LAYOUT,
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1), "versions": versions()}


def _backend() -> str:
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def measured_or_spawn_probe(trainer_measures: Callable[[], dict], refresh: bool = False) -> Probe:
    """The matching stored probe, else (or `refresh`) a new one; `trainer_measures` must be module-level (spawned)."""
    path, here = cache_file(), machine()
    if not refresh and (stored := _stored(path, here)):
        return stored
    lock = path.with_name(f"{path.name}.lock")
    # a sweep's jobs start together: all but one wait here for its figures, and a user should see why
    with held_exclusively(lock, lambda: log.info("another process is measuring this machine's memory figures (it "
                                                 "holds %s): waiting to read them", lock)):
        if not refresh and (stored := _stored(path, here)):  # written while this one waited
            return stored
        return _spawn_probe_and_write(path, here, trainer_measures)


def _stored(path: Path, here: dict) -> Probe | None:
    try:
        stored = json.loads(path.read_text())
        return Probe(**stored) if stored.get("machine") == here else None
    except (OSError, ValueError, TypeError):
        return None  # none, unreadable or from an older layout: measured again


def _spawn_probe_and_write(path: Path, here: dict, trainer_measures: Callable[[], dict]) -> Probe:
    log.info("measuring this machine's memory figures once (a training process and a loader worker), "
             "stored in %s", path)
    started = time.perf_counter()
    probe = Probe(**_spawn_trainer_probes(trainer_measures), **_spawn_worker_probe(), machine=here)
    with atomic_write(path) as f:
        json.dump(probe.__dict__, f, indent=2)
    log.info("machine probe: training process %.0f MiB + %.2f MiB a layer, worker %.0f MiB + %.2f × its largest "
             "decode, activations × %.2f (%.0f s)", probe.trainer_mib, probe.step_mib_per_layer, probe.worker_mib,
             probe.worker_bytes_per_decoded_byte, probe.activation_factor, time.perf_counter() - started)
    return probe


def _spawn_trainer_probes(trainer_measures: Callable[[], dict]) -> dict:
    """The lowest activation factor and lowest base of PROCESSES children: one now and then settles on more memory."""
    processes = [_spawn_trainer_probe(trainer_measures) for _ in range(PROCESSES)]
    figures = min(processes, key=lambda each: each["activation_factor"])
    return {**figures, "trainer_mib": min(each["trainer_mib"] for each in processes)}


def _spawn_trainer_probe(trainer_measures: Callable[[], dict]) -> dict:
    context = mp.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    where = (trainer_measures.__module__, trainer_measures.__qualname__)
    process = context.Process(target=_trainer_child, args=(child, *where), name="app-memory-probe")
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


def _trainer_child(conn, module: str, name: str) -> None:
    """In its own process: `module`'s `name` imported and run in the stderr capture; figures and stderr sent back."""
    # JAX's GPU pool takes what the parent, already holding the GPU, left: the plan adds the run's own pool
    # (app/training/devices.py: allocator_host_mib), so the base is measured without one
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    with native_stderr_captured() as text:
        try:
            result = getattr(importlib.import_module(module), name)()
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            result = {"error": f"{type(error).__name__}: {error}"}
    conn.send({**result, "stderr": "".join(text)})
    conn.close()


def resident() -> int:
    return psutil.Process().memory_info().rss


def high_water() -> int:
    """The peak resident size since the process started or `reset_high_water` (VmHWM), in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def reset_high_water() -> None:
    """VmHWM back to the resident size now (Linux: "5" to clear_refs), so a mark is one step's peak."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def _spawn_worker_probe() -> dict:
    """A real worker's USS after small images (spawned; forked), then (fresh ones) large ones and pyramid regions."""
    rng = np.random.default_rng(0)
    uss, splits = {}, {}
    with tempfile.TemporaryDirectory(prefix="app-probe-") as tmp:
        for name, (h, w) in (("small", SMALL), ("large", LARGE)):
            paths = []
            for i in range(4):
                noise = rng.integers(0, 256, (h // 4, w // 4, 3), np.uint8).repeat(4, 0).repeat(4, 1)
                paths.append(Path(tmp) / f"{name}{i}.jpg")
                Image.fromarray(noise).save(paths[-1], quality=90)
            splits[name] = FileSplit(paths, [0] * len(paths))
            uss[name], _ = _worker_uss(splits[name], "spawn")
        uss["forked"], server = _worker_uss(splits["small"], "forkserver")
        regions = _region_split(Path(tmp) / "pyramid.tif", rng)
        uss["regions"], _ = _worker_uss(regions, "spawn")
        # forked, the reads add more: a forked worker starts from the server's pages, and what it writes becomes
        # its own (a slide run's workers measured 30 MiB each over a plan that took the spawned figure)
        uss["forked_regions"], _ = _worker_uss(regions, "forkserver")
    decoded = (LARGE[0] * LARGE[1] - SMALL[0] * SMALL[1]) * 3
    return {"worker_mib": uss["small"] / MIB, "forked_worker_mib": uss["forked"] / MIB, "fork_server_mib": server / MIB,
            "worker_bytes_per_decoded_byte": max(uss["large"] - uss["small"], 0) / decoded,
            "worker_region_mib": max(uss["regions"] - uss["small"], 0) / MIB,
            "forked_worker_region_mib": max(uss["forked_regions"] - uss["forked"], 0) / MIB}


def _worker_uss(split, start_method: str) -> tuple[int, int]:
    """A worker's USS once it built every sample of `split` (app/capacity/memory.py), and the fork server's figure."""
    queue = Queue(workers=1, max_size=1, start_method=start_method)
    settings = Settings(batch_size=2, image_size=(32, 32), queue=queue)
    enqueuer = Enqueuer({"train": split}, {"train": Augmenter([], (32, 32), draft=False)}, settings)
    with Loader(enqueuer) as loader:
        for _ in loader.batches("train", np.arange(len(split)), 0):
            pass
        return private_bytes(loader.worker_pids[0]), fork_server_bytes()


def _region_split(path: Path, rng: np.random.Generator) -> PatchSplit:
    """Four 32² patches of a small JPEG-tiled pyramid at `path`: a worker's region reads (tifffile's zarr store)."""
    image = rng.integers(0, 256, (128, 128, 3), np.uint8).repeat(4, 0).repeat(4, 1)
    with tifffile.TiffWriter(path) as tif:
        tif.write(image, tile=(128, 128), compression="jpeg", photometric="rgb", subifds=1)
        tif.write(image[::2, ::2], tile=(128, 128), compression="jpeg", photometric="rgb", subfiletype=1)
    # no chunk kept: what a worker keeps is the plan's own line (data.patches.chunk_cache_mib)
    patches = PatchesConfig(size=[32, 32], level=1, min_foreground=0.0, chunk_cache_mib=0)
    return grid_split([str(path)], patches)[0]
