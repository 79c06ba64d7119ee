"""The memory plan of a config: host and device memory predicted from this machine's probe, the model's figures and
the data's largest decode; the fixes when it does not fit; the batch-size table."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import psutil

from app.augment import Augmenter, eval_transforms
from app.data.pixels.images import Decode
from app.data.slides.patches import PatchSplit

MIB = 2**20
GIB = 2**30
# What the training process holds of uint8 batches beside the ring: the one the step trains on,
# the one the prefetch has copied out ahead (app/loader/prefetch.py), and the one being copied to
# the device ahead of the step (app/training/feed.py).
TRAINER_UINT8_BATCHES = 3
# What the device holds of them: the step's and the next one, copied ahead of it.
DEVICE_UINT8_BATCHES = 2
# How far a run's measured peak may be from its plan (docs/troubleshooting.md, Memory: repeated runs
# spread by a few per cent, and the plan leaves out what it cannot see, such as Python's own garbage
# between collections). A limit admits a plan only with this margin, so no run passes the limit it was
# admitted under.
MARGIN = 0.10
TABLE_BATCHES = [2**k for k in range(5, 17)]  # the batch-size table: 32 … 65536
TABLE_SIDES = [32, 64, 128, 256, 512, 1024]


@dataclass(frozen=True, kw_only=True)
class Probe:
    """This machine's figures, measured once (app/capacity/probe.py)."""

    trainer_mib: float  # a training process before its model: TensorFlow, Keras, the app, tf.data, TensorBoard (RSS)
    worker_mib: float  # a spawned loader worker process after its first small samples (USS)
    forked_worker_mib: float  # one forked by the fork server, which holds the modules it shares with them (USS)
    fork_server_mib: float  # the fork server: the workers' modules, once (its own pages and those it shares)
    worker_bytes_per_decoded_byte: float  # how a worker grows with the largest image it decodes
    worker_region_mib: float  # what a worker adds to read regions of a tiled pyramid (zarr, its stores: patches)
    forked_worker_region_mib: float  # the same in a forked worker
    activation_factor: float  # host bytes a training step holds per float32 byte of layer outputs
    step_mib_per_layer: float  # the compiled train and test steps, a layer of the model
    machine: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ModelFacts:
    """What the model holds on its device (app/model.py: memory_facts)."""

    parameter_bytes: int
    optimizer_bytes: int
    activation_bytes_per_sample: int  # every layer's output, one sample, in the compute dtype
    layers: int  # the layers that compute (nested models' included): the compiled steps grow with them


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The config's figures the plan needs."""

    batch_size: int
    image_size: tuple[int, int]
    max_size: int  # ring slots: queue.max_size as the loader caps it (app/loader/settings.py: ring_slots)
    workers: int
    processes: bool  # workers are processes (each with its own interpreter), not threads
    forked: bool = False  # those processes forked by a fork server holding their modules (queue.start_method)
    largest_decode_bytes: int  # the largest image's RGB array (after any draft reduction)
    largest_pillow_bytes: int = 0  # what Pillow's own copies of an image hold beside it (not JPEGs OpenCV decodes)
    device_is_host: bool  # no GPU: the device's share is host memory too
    bands: int = 3  # the images' bands and the bytes of a sample (data.channels, data.dtype)
    itemsize: int = 1
    region_reads: bool = False  # patches of large images (data.patches), read region by region
    kept_chunk_bytes: int = 0  # the decoded chunks a loading process keeps (data.patches.chunk_cache_mib at most)
    mask_itemsize: int = 0  # a mask beside each image (data.task=segmentation): its bytes a pixel; 0: none
    allocator_mib: float = 0.0  # the GPU allocator's bookkeeping in host memory (app/training/devices.py)

    @property
    def pixels(self) -> int:
        """The values of one batch: batch × H × W × bands."""
        return self.batch_size * self.image_size[0] * self.image_size[1] * self.bands


@dataclass
class Plan:
    host: list[tuple[str, float]]  # (what, MiB)
    device: list[tuple[str, float]]
    workload: Workload

    @property
    def host_mib(self) -> float:
        return sum(mib for _, mib in self.host)

    @property
    def device_mib(self) -> float:
        return sum(mib for _, mib in self.device)

    def record(self) -> dict:
        """For summary.json."""
        return {"host_peak_mib": round(self.host_mib, 1), "device_mib": round(self.device_mib, 1),
                "host": {k: round(v, 1) for k, v in self.host}, "device": {k: round(v, 1) for k, v in self.device}}


def workload(data, largest: tuple[int, int], run, splits: tuple) -> Workload:
    """The figures the plan needs of a loaded config's data group and its run plan (app/capacity/run_plan.py);
    `splits`: the first the training split, whose kind says whether patches are read by region, and a mask's type."""
    queue, split = run.queue, splits[0]
    masks, patched = split.mask_dtype, [s for s in splits if isinstance(s, PatchSplit)]
    levels = {key: size for s in patched for key, size in s.level_bytes().items()}  # what the loader's reads can keep
    kept = min(data.patches.chunk_cache_mib * MIB, sum(levels.values())) if patched else 0
    return Workload(batch_size=run.batch_size, image_size=tuple(data.image_size), max_size=queue.max_size,
                    workers=queue.workers, processes=queue.use_multiprocessing, forked=queue.forked,
                    largest_decode_bytes=largest[0],
                    largest_pillow_bytes=largest[1], device_is_host=run.device_is_host, bands=run.pixels.bands,
                    itemsize=np.dtype(run.pixels.dtype).itemsize, region_reads=isinstance(split, PatchSplit),
                    kept_chunk_bytes=kept,
                    allocator_mib=run.allocator_mib, mask_itemsize=0 if masks is None else np.dtype(masks).itemsize)


def plan_for(config, splits: tuple, model: ModelFacts, probe: Probe, *, run) -> Plan:
    """The plan of a config training on `splits` with run plan `run`'s queue, the largest decode read off headers."""
    data = config.data

    def decode(transforms) -> Decode:
        return Augmenter(transforms, data.image_size, draft=data.decode.draft, max_pixels=data.max_image_pixels,
                         pixels=run.pixels).decode

    rules = [decode(config.augment.transforms), decode(eval_transforms(config.augment, data.image_size))]
    sizes = [split.largest_decode_bytes(rule) for split, rule in zip(splits, rules, strict=False)]
    largest = (max(a for a, _ in sizes), max(p for _, p in sizes))
    return predict(workload(data, largest, run, splits), probe, model)


BUDGET = "queue.memory_budget_mb"


def limit(queue) -> tuple[str, float]:
    """(name, MiB) the host peak must stay under: the memory available now, or queue.memory_budget_mb if lower."""
    available = psutil.virtual_memory().available / MIB
    budget = queue.memory_budget_mb
    if budget is None:
        return "the memory available now", available
    if budget <= available:
        return BUDGET, float(budget)
    return f"{BUDGET}={budget} capped at the memory available now", available


def fits(plan: Plan, limit_mib: float) -> bool:
    """Whether `plan`'s host peak, with the MARGIN the plan holds to, is within `limit_mib`."""
    return plan.host_mib * (1 + MARGIN) <= limit_mib


def batch_bytes(batch: int, size: tuple[int, int], bands: int = 3, itemsize: int = 1) -> int:
    """One batch as the loader hands it: batch × H × W × bands, `itemsize` bytes each (uint8 1, uint16 2)."""
    return batch * size[0] * size[1] * bands * itemsize


def decode_mib(work: Workload, probe: Probe) -> float:
    """A worker's growth for the largest image: the probe's growth a byte of array, Pillow's copies, region reads."""
    region_mib = probe.forked_worker_region_mib if work.forked and work.processes else probe.worker_region_mib
    regions = region_mib if work.region_reads else 0.0
    return (probe.worker_bytes_per_decoded_byte * work.largest_decode_bytes + work.largest_pillow_bytes) / MIB + regions


def predict(work: Workload, probe: Probe, model: ModelFacts) -> Plan:
    batch, kind = work.pixels * work.itemsize, "uint8" if work.itemsize == 1 else "uint16"
    # a mask beside each image (data.task=segmentation), in the ring and the training process alike
    batch += work.batch_size * work.image_size[0] * work.image_size[1] * work.mask_itemsize
    their, its = (" and their masks", " and its masks") if work.mask_itemsize else ("", "")
    device = [(f"{kind} batches{their} ({DEVICE_UINT8_BATCHES}: the step's, the next one copied ahead)",
               DEVICE_UINT8_BATCHES * batch / MIB),
              ("float32 batch (the first layer's output)", 4 * work.pixels / MIB),
              ("parameters and their gradients", 2 * model.parameter_bytes / MIB),
              ("optimizer state", model.optimizer_bytes / MIB),
              ("activations (estimate)", probe.activation_factor * model.activation_bytes_per_sample
               * work.batch_size / MIB)]
    slots = work.max_size if work.workers else 1  # in-process loading builds one batch at a time
    host = [("TensorFlow and the app (this machine's probe)", probe.trainer_mib),
            (f"compiled train and test steps ({model.layers} layers × {probe.step_mib_per_layer:.2f} MiB)",
             model.layers * probe.step_mib_per_layer),
            (f"{kind} batches{their} in the training process ({TRAINER_UINT8_BATCHES})",
             TRAINER_UINT8_BATCHES * batch / MIB),
            (f"the ring ({slots} slot(s) of one {kind} batch{its})", slots * batch / MIB)]
    if work.allocator_mib:
        host.insert(2, ("the GPU allocator's bookkeeping (1/32 of its preallocated pool)", work.allocator_mib))
    kept = work.kept_chunk_bytes / MIB
    if work.workers and work.processes:
        each = (probe.forked_worker_mib if work.forked else probe.worker_mib) + decode_mib(work, probe) + kept
        chunks = f", {kept:.0f} of them decoded chunks kept" if kept else ""
        if work.forked:
            host.append(("the fork server (the workers' modules, shared with them)", probe.fork_server_mib))
        host.append((f"{work.workers} worker processes ({each:.0f} MiB each{chunks})", work.workers * each))
    else:  # threads or in-process: the decode's buffers in the training process, and one process's chunks kept
        threads = max(work.workers, 1)
        host.append((f"decode buffers of {threads} loading thread(s)",
                     threads * decode_mib(work, probe)))
        if kept:
            host.append(("decoded chunks kept (data.patches.chunk_cache_mib)", kept))
    if work.device_is_host:
        host += [(f"device (CPU): {name}", mib) for name, mib in device]
    return Plan(host, device, work)


def fixes(plan: Plan, probe: Probe, model: ModelFacts, limit_mib: float) -> list[str]:
    """Each of max_size, batch and workers at its largest value that fits `limit_mib` (with MARGIN), with its figure."""
    w, found = plan.workload, []
    options = [("queue.max_size", w.max_size, lambda v: dataclasses.replace(w, max_size=v), 1),
               ("data.batch_size", w.batch_size, lambda v: dataclasses.replace(w, batch_size=v), 1),
               ("queue.workers", w.workers, lambda v: dataclasses.replace(w, workers=v), 0)]
    for key, current, change, least in options:
        for value in range(current - 1, least - 1, -1):
            changed = predict(change(value), probe, model)
            if fits(changed, limit_mib):
                found.append(f"{key}={value}: {changed.host_mib:.0f} MiB")
                break
    return found


def render(plan: Plan, limit: tuple[str, float] | None = None, fixed: list[str] | None = None) -> str:
    """The plan as text: host parts, the peak against `limit` (name, MiB), the fixes, the device parts."""
    lines = ["host memory (predicted peak):"]
    lines += [f"  {mib:9.1f} MiB  {name}" for name, mib in plan.host]
    lines.append(f"  {plan.host_mib:9.1f} MiB  total")
    if limit:
        name, mib = limit
        fitting = fits(plan, mib)
        lines.append(f"  {'fits' if fitting else 'does NOT fit'} {name} ({mib:.0f} MiB), with the plan's "
                     f"{MARGIN:.0%} margin: {plan.host_mib * (1 + MARGIN):.0f} MiB")
        if not fitting:
            lines.append("  fixes: " + ("; ".join(fixed) if fixed else "none of max_size, batch or workers alone"))
    where = "on the CPU, counted above" if plan.workload.device_is_host else "on the GPU, apart from the host"
    lines.append(f"device memory ({where}):")
    lines += [f"  {mib:9.1f} MiB  {name}" for name, mib in plan.device]
    lines.append(f"  {plan.device_mib:9.1f} MiB  total")
    return "\n".join(lines)


def batch_size_table(batch: int, size: tuple[int, int], bands: int = 3, dtype: str = "uint8") -> str:
    """One batch in GiB (float32 / `dtype`) by batch × square side, the config's own added and marked (`>`, `*`)."""
    itemsize = np.dtype(dtype).itemsize
    batches = sorted(set(TABLE_BATCHES) | {batch})
    sides = [(s, s) for s in TABLE_SIDES]
    if tuple(size) not in sides:
        sides = sorted(sides + [tuple(size)], key=lambda hw: hw[0] * hw[1])
    head = ["batch"] + [f"{'*' if hw == tuple(size) else ''}{hw[0]}×{hw[1]}" for hw in sides]
    rows = [" | ".join(head), " | ".join(["---:"] * len(head))]
    for b in batches:
        cells = [f"{'>' if b == batch else ''}{b}"]
        cells += [f"{_gib(batch_bytes(b, hw, bands, 4))} / {_gib(batch_bytes(b, hw, bands, itemsize))}"
                  for hw in sides]
        rows.append(" | ".join(cells))
    return (f"one batch in GiB, float32 / {dtype} (H × W × {bands} × batch × 4 bytes, or × {itemsize}); "
            "> your batch, * your resolution:\n" + "\n".join(f"| {r} |" for r in rows))


def _gib(n: int) -> str:
    """Three significant digits, never in exponent form (0.000366, 0.75, 768)."""
    return np.format_float_positional(n / GIB, precision=3, unique=False, fractional=False, trim="-")
