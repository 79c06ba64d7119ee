"""`queue.workers=auto` and `queue.max_size=auto`: a short probe before training, then the choice.

The probe builds up to one batch of training samples in this process, single-threaded as a
worker builds them (read, decode, augment), and times each; then it times the model's compiled
training step on that batch, a few calls after one to trace it. It updates no weight: every
variable of the model, its optimizer and its metrics is put back as it was. It consumes no
randomness: a sample's augmentation is drawn from (seed, epoch, index) alone, and Dropout's seed
state is one of the variables put back. So a seeded `auto` run trains exactly as a run given
the chosen values does.

The choice (`choose`, arithmetic only): the fewest workers whose mean batch time (a batch's
samples split between them) keeps the predicted data wait under WAIT_TARGET, capped by the cores
this process may use and queue.worker_limit (or the machine's limit); the fewest ring slots that
absorb a slow batch (its 95th percentile against the fastest step); one slot when the loader is
the bottleneck anyway. Both within queue.memory_budget_mb (or the memory available), by the
memory plan (app/memory_plan.py). A value the user gave is kept.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.errors import BadSampleError, DataError
from app.loader.pipeline import make_sample, most_workers
from app.rules import AUTO

log = logging.getLogger("app.train")

WAIT_TARGET = 0.05  # predicted share of the time the step waits on the loader
PROBE_SECONDS = 3.0  # building samples stops after this long (at least MIN_SAMPLES), or at one batch
MIN_SAMPLES = 4
STEP_CALLS = 3  # timed calls into the compiled step, after one that traces it
SLOW_BATCH_Z = 1.645  # a batch's 95th percentile: its mean + z standard deviations


@dataclass(frozen=True)
class Timings:
    """What the probe measured: seconds each sample took to build, and each training step."""

    sample_s: list[float]
    step_s: list[float]


@dataclass(frozen=True)
class Choice:
    workers: int
    max_size: int
    reason: str
    figures: dict

    def record(self) -> dict:
        """For summary.json."""
        return {"workers": self.workers, "max_size": self.max_size, "reason": self.reason, **self.figures}


def wanted(queue) -> bool:
    return AUTO in (queue.workers, queue.max_size)


def choose(t: Timings, batch_size: int, queue, fits: Callable[[int, int], bool]) -> Choice:
    """The workers and slots for `queue` (its non-`auto` values kept) from the probe's timings;
    `fits(workers, max_size)`: whether the memory plan of that pair is within the limit."""
    mean_s, std_s = float(np.mean(t.sample_s)), float(np.std(t.sample_s))
    step_s, fastest_s = float(np.median(t.step_s)), float(np.min(t.step_s))
    cap, cap_why = most_workers(queue)

    def batch_s(w: int) -> float:  # the samples of a batch split between w workers
        return batch_size * mean_s / w

    def wait(w: int) -> float:
        return max(0.0, 1 - step_s / batch_s(w))

    reasons = []
    workers = queue.workers
    if workers == AUTO:
        workers = next((w for w in range(1, cap + 1) if wait(w) < WAIT_TARGET), cap)
        if wait(workers) < WAIT_TARGET:
            reasons.append(f"workers={workers}: the fewest that build a batch ({batch_s(workers) * 1e3:.0f} ms) "
                           f"within a step ({step_s * 1e3:.0f} ms)")
        else:
            reasons.append(f"workers={workers}: the most allowed ({cap_why}); the loader still bounds training "
                           f"(a batch {batch_s(workers) * 1e3:.0f} ms, a step {step_s * 1e3:.0f} ms)")
        while workers > 1 and not fits(workers, 1):
            workers -= 1
            reasons.append(f"down to {workers} by the memory limit")
    max_size = queue.max_size
    slow_s = batch_s(workers) + SLOW_BATCH_Z * std_s * math.sqrt(batch_size / max(workers, 1))
    if max_size == AUTO:
        if workers == 0 or batch_s(workers) >= step_s:
            max_size = 1
            reasons.append("max_size=1: the step takes each batch as soon as it is built, more slots would "
                           "only hold memory")
        else:
            max_size = max(1, math.ceil(slow_s / fastest_s))
            reasons.append(f"max_size={max_size}: a slow batch ({slow_s * 1e3:.0f} ms, 95th percentile) within "
                           f"that many of the fastest steps ({fastest_s * 1e3:.0f} ms)")
            while max_size > 1 and not fits(workers, max_size):
                max_size -= 1
                reasons.append(f"max_size down to {max_size} by the memory limit")
    figures = {"sample_ms": round(mean_s * 1e3, 3), "sample_std_ms": round(std_s * 1e3, 3),
               "samples_probed": len(t.sample_s), "step_ms": round(step_s * 1e3, 2),
               "fastest_step_ms": round(fastest_s * 1e3, 2), "batch_ms": round(batch_s(max(workers, 1)) * 1e3, 2),
               "predicted_data_wait": round(wait(max(workers, 1)), 3), "workers_cap": cap}
    return Choice(int(workers), int(max_size), "; ".join(reasons), figures)


def time_samples(split, augmenter, indices, seed: int) -> tuple[list[float], list[np.ndarray], list[int]]:
    """Seconds to read, decode and augment each of `indices` (epoch 0), single-threaded as in a
    worker, until one batch is built or PROBE_SECONDS have passed; the samples and their indices.
    An unreadable sample is passed over: the run's own policy deals with it."""
    import cv2


    threads = cv2.getNumThreads()
    cv2.setNumThreads(0)  # as in a worker (app/loader/worker.py)
    times, images, built = [], [], []
    try:
        for index in indices:
            started = time.perf_counter()
            try:
                images.append(make_sample(split, augmenter, int(index), seed, 0))
            except BadSampleError:
                continue
            if built:  # the first pays for building the augmentation
                times.append(time.perf_counter() - started)
            built.append(int(index))
            if sum(times) > PROBE_SECONDS and len(times) >= MIN_SAMPLES:
                break
    finally:
        cv2.setNumThreads(threads)
    return times, images, built


def time_step(net, batch: tuple, class_weights=None) -> list[float]:
    """Seconds of each of STEP_CALLS training steps on `batch` (images, labels), after one that
    traces the step; the model, its optimizer and its metrics left as they were."""
    from app.training.steps import Feed, build_metrics

    build_metrics(net)  # before the train function exists (JAX fixes its state's shape then)
    if not net.optimizer.built:
        net.optimizer.build(net.trainable_variables)
    calls_needed = 1 + STEP_CALLS
    feed = Feed([batch] * calls_needed * net.steps_per_execution, calls_needed * net.steps_per_execution,
                class_weights)
    times = []
    with kept(net):
        net.make_train_function()
        step_calls = feed.calls(net, "train")
        for _ in range(calls_needed):
            started = time.perf_counter()
            logs = step_calls()
            float(np.asarray(logs["loss"]))  # the step has finished on the device
            times.append((time.perf_counter() - started) / net.steps_per_execution)
        step_calls.sync()
    feed.close()
    return times[1:]


class kept:  # noqa: N801 - used as a context manager
    """Every variable of `net` (its layers' weights and seed states, its optimizer's, its
    metrics') as on entry, put back on exit; an error if the probe created one."""

    def __init__(self, net):
        self.net = net

    def _variables(self) -> list:
        net = self.net
        return [*net.trainable_variables, *net.non_trainable_variables, *net.optimizer.variables,
                *net.metrics_variables]

    def __enter__(self):
        self.saved = [(v, np.array(v.numpy(), copy=True)) for v in self._variables()]
        return self

    def __exit__(self, *exc) -> None:
        for variable, value in self.saved:
            variable.assign(value)
        if len(self._variables()) != len(self.saved):
            raise RuntimeError("the queue probe's training step created variables it cannot put back")


def probe_and_choose(config, split, net, fits: Callable[[int, int], bool], class_weights=None) -> Choice:
    """Time up to a batch of `split`'s samples and the compiled step of `net` on them, then choose."""
    from app.augment import augmenters
    from app.loader.order import epoch_order

    batch_size = config.data.batch_size
    augmenter = augmenters(config.data, {"probe": config.augment.transforms})["probe"]
    order = epoch_order(len(split), seed=config.seed, epoch=0, shuffle=config.queue.shuffle)[:batch_size + 1]
    sample_s, images, built = time_samples(split, augmenter, order, config.seed)
    if not sample_s:
        raise DataError(f"the queue probe (queue.workers or queue.max_size=auto) could read at most one of the "
                        f"first {len(order)} training samples; set both to numbers, or see data.on_bad_sample")
    rows = np.resize(np.arange(len(built)), batch_size)  # fewer than a batch built: repeated
    images = np.stack([images[i] for i in rows])
    labels = np.asarray(split.labels, np.int64)[np.asarray(built)[rows]]
    step_s = time_step(net, (images, labels), class_weights)
    choice = choose(Timings(sample_s, step_s), batch_size, config.queue, fits)
    log.info("queue auto: workers %d, max_size %d (%s)", choice.workers, choice.max_size, choice.reason)
    return choice


def applied(config, choice: Choice):
    """`config` with the chosen queue.workers and queue.max_size."""
    queue = dataclasses.replace(config.queue, workers=choice.workers, max_size=choice.max_size)
    return dataclasses.replace(config, queue=queue)
