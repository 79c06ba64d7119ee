"""`queue.*=auto` made the Queue a command runs, here alone: a probe (no randomness consumed) times worker-built samples
and the step, then the fewest workers near the best pace and slots for a slow batch, within memory; or loading_only."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from app.augment import augmenters
from app.data.slides.regions import close_open_files
from app.errors import BadSampleError, DataError
from app.loader.order import epoch_order
from app.loader.pipeline import make_sample, usable_cores
from app.loader.settings import Queue
from app.processes import worker_limit
from app.rules import AUTO

log = logging.getLogger("app.train")

WAIT_TARGET = 0.05  # how much slower than the best a batch may come (the step waiting on the loader)
PROBE_SECONDS = 3.0  # building samples stops after this long (at least MIN_SAMPLES), or at one batch
MIN_SAMPLES = 4
SLOW_BATCH_Z = 1.645  # a batch's 95th percentile: its mean + z standard deviations
# Times the model's compiled step on one (images, labels) batch: each call's seconds, and the CPU
# seconds the training process spent in each (app/training/calibration.py: time_step).
StepTimer = Callable[[tuple], tuple[list[float], list[float]]]


@dataclass(frozen=True)
class Timings:
    """What the probe measured: each sample's build seconds, each step's seconds and CPU seconds (all threads)."""

    sample_s: list[float]
    step_s: list[float]
    step_cpu_s: list[float]


@dataclass(frozen=True)
class Cycle:
    """A batch's period with w workers: max(step, samples / w, CPU work of step and samples / shared cores)."""

    t: Timings
    batch_size: int
    cores: int

    @property
    def sample_s(self) -> float:
        return float(np.mean(self.t.sample_s))

    @property
    def step_s(self) -> float:
        return float(np.median(self.t.step_s))

    @property
    def shared_s(self) -> float:
        return (float(np.median(self.t.step_cpu_s)) + self.batch_size * self.sample_s) / self.cores

    def batch_s(self, workers: int) -> float:
        return self.batch_size * self.sample_s / max(workers, 1)

    def __call__(self, workers: int) -> float:
        return max(self.step_s, self.batch_s(workers), self.shared_s)

    @property
    def step_cores(self) -> float:
        """The share of the cores the step keeps busy: ~1 on a CPU, near 0 when a GPU computes it."""
        return min(1.0, float(np.median(self.t.step_cpu_s)) / (self.step_s * self.cores)) if self.step_s else 0.0

    def wait(self, workers: int) -> float:
        """The step's share of time waiting on the loader: on saturated cores only its own CPU share stretches."""
        busy = (1 - self.step_cores) * self.step_s + self.step_cores * self.shared_s
        return max(0.0, 1 - max(self.step_s, busy) / self(workers))

    def slow_batch_s(self, workers: int) -> float:
        """A batch's 95th percentile: each worker's share of it varies as its samples do."""
        share = self.batch_size / max(workers, 1)
        return self.batch_s(workers) + SLOW_BATCH_Z * float(np.std(self.t.sample_s)) * math.sqrt(share)

    def describe(self, workers: int) -> str:
        return (f"a batch every {self(workers) * 1e3:.0f} ms: the step {self.step_s * 1e3:.0f}, the samples "
                f"{self.batch_s(workers) * 1e3:.0f} on {workers} worker(s), all the CPU work on {self.cores} "
                f"core(s) {self.shared_s * 1e3:.0f}")


@dataclass(frozen=True)
class Choice:
    workers: int
    max_size: int
    reason: str
    figures: dict

    def record(self) -> dict:
        """For summary.json."""
        return {"workers": self.workers, "max_size": self.max_size, "reason": self.reason, **self.figures}


CPU_DEFAULT = 2  # a null queue.workers or queue.max_size where no accelerator is seen: the step takes the cores


@dataclass(frozen=True)
class Asked:
    """queue.workers and max_size as a run asks for them, a null (the default) made this machine's: `auto` where the
    backend sees a GPU or TPU, else CPU_DEFAULT; a resumed run keeps what its start made."""

    workers: int | str
    max_size: int | str
    reason: str | None = None  # why, where a null was made something

    def record(self) -> dict:
        """For summary.json (`queue_default`): what a resume keeps."""
        return {"workers": self.workers, "max_size": self.max_size, "reason": self.reason}


def asked(queue, accelerators: list[str] = (), kept: dict | None = None) -> Asked:
    """`queue`'s workers and max_size, each null made `kept`'s (a resumed run's `queue_default`) or this machine's."""
    nulls = [key for key in ("workers", "max_size") if getattr(queue, key) is None]
    if not nulls:
        return Asked(queue.workers, queue.max_size)
    if kept is not None:
        made, why = {key: kept[key] for key in nulls}, f"as the run's start made them ({kept.get('reason')})"
    elif accelerators:
        made, why = {key: AUTO for key in nulls}, f"auto: the backend sees {', '.join(accelerators)}"
    else:
        made, why = {key: CPU_DEFAULT for key in nulls}, (f"{CPU_DEFAULT}: no GPU or TPU, so the step takes the "
                                                          "cores (docs/queue.md)")
    values = {"workers": queue.workers, "max_size": queue.max_size, **made}
    return Asked(values["workers"], values["max_size"], f"{' and '.join(f'queue.{k}' for k in nulls)} {why}")


def wanted(queue, given: Asked | None = None) -> bool:
    given = given or asked(queue)
    return AUTO in (given.workers, given.max_size)


def most_workers(queue) -> tuple[int, str]:
    """The cap on `auto` workers and why: the usable cores, or queue.worker_limit (else rules.worker_limit) if lower."""
    cores = usable_cores()
    limit, why = (queue.worker_limit, "queue.worker_limit") if queue.worker_limit else worker_limit()
    return (cores, f"{cores} usable cores") if cores <= limit else (limit, why)


def resolved(queue, choice: Choice | None = None, given: Asked | None = None) -> Queue:
    # the queue group as a run takes it (`given`: its asked values, else a null the CPU's default): each `auto` the
    # probe's `choice` (which keeps a value given)
    given = given or asked(queue)
    if choice is None and wanted(queue, given):
        raise ValueError("queue.workers or queue.max_size is auto: the probe's choice resolves it")
    picked = choice or given
    return Queue.of(queue, workers=picked.workers, max_size=picked.max_size)


def provisional(queue, given: Asked | None = None) -> Queue:
    # what a memory plan starts from before the probe chooses: each `auto` as 1 (the plan is redone for any pair)
    given = given or asked(queue)
    return Queue.of(queue, workers=1 if given.workers == AUTO else given.workers,
                    max_size=1 if given.max_size == AUTO else given.max_size)


def loading_only(queue) -> Queue:
    """The queue of a command that only loads (no step to balance): `auto` workers the cap, `auto` max_size two."""
    # a null: the CPU's default (such a command does not look for an accelerator)
    given = asked(queue)
    return Queue.of(queue, workers=most_workers(queue)[0] if given.workers == AUTO else given.workers,
                    max_size=2 if given.max_size == AUTO else given.max_size)


def choose(t: Timings, batch_size: int, queue, fits: Callable[[int, int], bool], given: Asked | None = None) -> Choice:
    """Workers and slots for `queue` (`given`: as asked, a value kept); `fits(workers, max_size)`: within the limit."""
    given = given or asked(queue)
    cap, cap_why = most_workers(queue)
    cycle = Cycle(t, batch_size, usable_cores())
    reasons = []
    workers = given.workers
    if workers == AUTO:
        best = cycle(cap)
        workers = next(w for w in range(1, cap + 1) if 1 - best / cycle(w) < WAIT_TARGET)
        limited = cycle.batch_s(workers) >= max(cycle.step_s, cycle.shared_s)
        why = f"the most allowed ({cap_why}), and the loader still bounds training" if limited else \
            f"the fewest within {100 * WAIT_TARGET:.0f} % of the best"
        reasons.append(f"workers={workers}: {why}; {cycle.describe(workers)}")
        slots = 1 if given.max_size == AUTO else given.max_size
        while workers > 1 and not fits(workers, slots):
            workers -= 1
            reasons.append(f"down to {workers} by the memory limit")
    max_size = given.max_size
    if max_size == AUTO:
        max_size, why = _slots(cycle, workers)
        reasons.append(why)
        while max_size > 1 and not fits(workers, max_size):
            max_size -= 1
            reasons.append(f"max_size down to {max_size} by the memory limit")
    figures = {"sample_ms": round(cycle.sample_s * 1e3, 3), "sample_std_ms": round(float(np.std(t.sample_s)) * 1e3, 3),
               "samples_probed": len(t.sample_s), "step_ms": round(cycle.step_s * 1e3, 2),
               "step_cpu_ms": round(float(np.median(t.step_cpu_s)) * 1e3, 2), "cores": cycle.cores,
               "batch_ms": round(cycle.batch_s(workers) * 1e3, 2), "cycle_ms": round(cycle(workers) * 1e3, 2),
               "predicted_data_wait": round(cycle.wait(workers), 3), "workers_cap": cap}
    return Choice(int(workers), int(max_size), "; ".join(reasons), figures)


def _slots(cycle: Cycle, workers: int) -> tuple[int, str]:
    """The fewest ring slots that keep a slow batch from stalling the step (at least 2 with 2+ workers), and why."""
    pace = max(float(np.min(cycle.t.step_s)), cycle.shared_s)  # how fast the step can empty the ring
    if workers == 0:
        return 1, "max_size=1: loading in the training process builds one batch at a time"
    least = 1 if workers == 1 else 2
    if cycle.batch_s(workers) >= pace:
        return least, (f"max_size={least}: the workers bound training, so the ring never fills"
                       + (", and a worker done with its share starts on the next batch" if least > 1 else ""))
    slow = cycle.slow_batch_s(workers)
    slots = max(least, math.ceil(slow / pace))
    return slots, (f"max_size={slots}: a slow batch ({slow * 1e3:.0f} ms, 95th percentile) within that many "
                   f"batches taken ({pace * 1e3:.0f} ms each at the fastest)"
                   + (f"; at least {least}, so a worker done with its share starts on the next batch"
                      if least > 1 else ""))


def time_samples(split, augmenter, indices, seed: int) -> tuple[list[float], list[np.ndarray], list[int]]:
    """Seconds to build each of `indices` (epoch 0) as a worker, to a batch or PROBE_SECONDS; samples, indices built."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(0)  # as in a worker (app/loader/worker.py)
    times, images, built = [], [], []
    try:
        for index in indices:
            started = time.perf_counter()
            try:
                images.append(make_sample(split, augmenter, int(index), seed=seed, epoch=0))
            except BadSampleError:
                continue
            if built:  # the first pays for building the augmentation
                times.append(time.perf_counter() - started)
            built.append(int(index))
            if sum(times) > PROBE_SECONDS and len(times) >= MIN_SAMPLES:
                break
    finally:
        cv2.setNumThreads(threads)
        close_open_files()  # the slides it read, and their chunks kept: the workers' to hold, not this process's
    return times, images, built


def _batch(split, samples: list, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The probe's batch of `samples` (split's `indices`): images, and their labels (a class index, several labels'
    0/1 row) or, where the split's samples are (image, mask) pairs, their masks."""
    if split.mask_dtype is not None:
        return np.stack([image for image, _ in samples]), np.stack([mask for _, mask in samples])
    return np.stack(samples), np.asarray(split.labels)[indices]


def probe_and_choose(config, run, split, *, time_step: StepTimer, fits: Callable[[int, int], bool]) -> Choice:
    """Time up to a batch (run plan `run`'s share) of `split`'s samples and `time_step` on them; choose."""
    batch_size = run.batch_size
    augmenter = augmenters(config.data, {"probe": config.augment.transforms}, pixels=run.pixels,
                           masks=split.mask_dtype is not None)["probe"]
    order = epoch_order(len(split), seed=config.seed, epoch=0, shuffle=config.queue.shuffle)[:batch_size + 1]
    sample_s, images, built = time_samples(split, augmenter, order, config.seed)
    if not sample_s:
        raise DataError(f"the queue probe (queue.workers or queue.max_size=auto) could read at most one of the "
                        f"first {len(order)} training samples; set both to numbers, or see data.on_bad_sample")
    rows = np.resize(np.arange(len(built)), batch_size)  # fewer than a batch built: repeated
    step_s, step_cpu_s = time_step(_batch(split, [images[i] for i in rows], np.asarray(built)[rows]))
    choice = choose(Timings(sample_s, step_s, step_cpu_s), batch_size, config.queue, fits, given=run.asked)
    log.info("queue auto: workers %d, max_size %d (%s)", choice.workers, choice.max_size, choice.reason)
    return choice

