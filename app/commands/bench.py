"""`python -m app bench [overrides]`: time the input pipeline alone, this loader against
`keras.utils.PyDataset` and serial decode+augment, on the configured data and augmentation.

Each mode runs in a fresh process, so its time to first batch is its own, and then (unless
`bench.memory=false`) once more in another, whose peak PSS (summed over its workers, sampled
every 100 ms from here) is the mode's. The timed run is never sampled: reading a process's
smaps_rollup takes about 16 ms of CPU for a TensorFlow process on a 2-core VM and holds that
process's memory-map lock; timed while sampled, Keras's threads mode lost a fifth of its speed
and this loader a tenth. Modes:
  baseline         the trivial model fit on one in-memory uint8 batch: the training process with no loader
  loader_steps     this loader → prefetch (uint8) → the trivial model, through `train`'s own step loop
  loader_fit       the same batches through `model.fit` (tf.data.from_generator, no prefetch)
  loader           this loader and its prefetch, no model
  keras_threads    keras.utils.PyDataset(workers, use_multiprocessing=False, max_queue_size) → fit: Pillow's
                   full decode as such code does it, the same augmentation, in __getitem__ (keras_baseline.py)
  keras_processes  the same with use_multiprocessing=True
  serial           decode + augment one sample after another in one single-threaded process (per-core rate)
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from contextlib import nullcontext
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from app.config import conf_dir, register, to_plain, validate

register()
log = logging.getLogger("app.bench")
MODES = ["baseline", "loader_steps", "loader_fit", "loader", "keras_threads", "keras_processes", "serial"]
KERAS_MODES = ("keras_threads", "keras_processes")


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from app.augment import build_compose
    from app.data import load_source
    from app.errors import ConfigError
    from app.training.rundir import hardware, versions, write_json

    cfg = validate(cfg)
    plain = to_plain(cfg)
    bench = plain["bench"]
    unknown = [m for m in bench["modes"] if m not in MODES]
    if unknown or bench["batches"] < 1 or bench["warmup"] < 0:
        raise ConfigError(f"config key `bench.modes` = {bench['modes']} / `bench.batches` = {bench['batches']} / "
                          f"`bench.warmup` = {bench['warmup']} is not allowed: modes from {', '.join(MODES)}, "
                          "at least 1 timed batch, warmup 0 or more.")
    build_compose(plain["augment"]["transforms"], plain["data"]["image_size"])
    source = load_source(cfg.data)  # generates the synthetic data once, before any timing
    needed = (bench["warmup"] + bench["batches"]) * plain["data"]["batch_size"]
    log.info("bench on %s: %d training samples, %d needed a mode (epochs repeat when fewer)", source.name,
             len(source.train), needed)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    results = {}
    for mode in bench["modes"]:
        result = _in_own_process(mode, plain, sampled=False)
        if bench["memory"] and "error" not in result:
            sampled = _in_own_process(mode, plain, sampled=True)
            if "error" in sampled:
                result["memory_error"] = sampled["error"]
            else:
                result.update(peak_pss_mb=sampled["peak_pss_mb"], pss_samples=sampled["pss_samples"],
                              pss_reads=sampled["pss_reads"], sampled_images_per_s=sampled["images_per_s"])
        results[mode] = result
        log.info("%-16s %s", mode, _line(result))
    report = {"results": results, "config": {k: plain[k] for k in ("data", "augment", "queue", "bench", "seed")},
              "derived": _derived(results, plain), "versions": versions(), "hardware": hardware(),
              "overrides": list(HydraConfig.get().overrides.task)}
    write_json(run_dir / "bench.json", report)
    print(_table(results, report["derived"]))
    print(f"\nwritten: {run_dir / 'bench.json'}")


def _in_own_process(mode: str, plain: dict, *, sampled: bool) -> dict:
    """One run of `mode` in a fresh process; with `sampled`, its tree's PSS every 100 ms."""
    from app.memory import PeakMemory

    context = mp.get_context("spawn")
    parent_end, child_end = context.Pipe(duplex=False)
    process = context.Process(target=_mode_main, args=(mode, plain, child_end), name=f"bench-{mode}")
    process.start()
    child_end.close()
    with PeakMemory(pid=process.pid) if sampled else nullcontext() as memory:
        result = parent_end.recv() if parent_end.poll(timeout=1800) else {"error": "timed out after 30 min"}
        process.join(timeout=60)
    if process.is_alive():
        process.kill()
    if sampled:
        result.update(peak_pss_mb=memory.peak / 2**20, pss_samples=memory.samples, pss_reads=memory.pss_reads)
    return result


def _line(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error']}"
    return f"{result['images_per_s']:8.1f} img/s, first batch {result['first_batch_s']:.2f} s, peak PSS {_mib(result)}"


def _mib(result: dict) -> str:
    """Peak PSS as a table shows it: not measured with `bench.memory=false`, or the sampled run's error."""
    if "peak_pss_mb" in result:
        return f"{result['peak_pss_mb']:.0f}"
    return f"failed: {result['memory_error']}" if "memory_error" in result else "-"


def _derived(results: dict, plain: dict) -> dict:
    """The figures the targets speak of."""
    ok = {m: r for m, r in results.items() if "error" not in r}
    data, queue = plain["data"], plain["queue"]
    batch_uint8 = data["batch_size"] * data["image_size"][0] * data["image_size"][1] * 3
    derived: dict = {"queue_bytes": queue["max_size"] * batch_uint8, "float32_batch_bytes": 4 * batch_uint8}
    keras_best = max((ok[m]["images_per_s"] for m in KERAS_MODES if m in ok), default=None)
    if keras_best:
        derived["keras_best_images_per_s"] = keras_best
        for mode in ("loader_steps", "loader_fit"):
            if mode in ok:
                derived[f"{mode}_vs_keras_best"] = ok[mode]["images_per_s"] / keras_best
    if "serial" in ok and "loader" in ok and queue["workers"]:
        ideal = ok["serial"]["images_per_s"] * queue["workers"]
        derived["loader_vs_serial_times_workers"] = ok["loader"]["images_per_s"] / ideal
    peaks = {m: r["peak_pss_mb"] for m, r in ok.items() if "peak_pss_mb" in r}
    if "baseline" in peaks:
        bound = (peaks["baseline"] + 120 * queue["workers"]
                 + (derived["queue_bytes"] + 2 * derived["float32_batch_bytes"]) / 2**20)
        derived["memory_bound_mb"] = bound
        for mode in ("loader_steps", "loader_fit"):
            if mode in peaks:
                derived[f"{mode}_peak_within_bound"] = peaks[mode] <= bound
    if "keras_processes" in peaks:
        for mode in ("loader_steps", "loader_fit"):
            if mode in peaks:
                derived[f"{mode}_peak_vs_keras_processes"] = peaks[mode] / peaks["keras_processes"]
    return derived


def _table(results: dict, derived: dict) -> str:
    rows = ["| mode | images/s | first batch (s) | peak PSS (MiB) |", "|---|---:|---:|---:|"]
    for mode, r in results.items():
        if "error" in r:
            rows.append(f"| {mode} | failed: {r['error']} | | |")
        else:
            rows.append(f"| {mode} | {r['images_per_s']:.1f} | {r['first_batch_s']:.2f} | {_mib(r)} |")
    rows.append("")
    rows += [f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in derived.items()]
    return "\n".join(rows)


# -- in the mode's own process ----------------------------------------------------------------

def _mode_main(mode: str, plain: dict, conn) -> None:
    import traceback

    try:
        result = _run_mode(mode, plain)
    except BaseException as error:  # noqa: BLE001 - reported as that mode's result
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        result = {"error": f"{type(error).__name__}: {first}", "traceback": traceback.format_exc()}
    conn.send(result)
    conn.close()


class _Clock:
    """Times batches: the first from the start, the rate over those after the warmup."""

    def __init__(self, warmup: int, batch: int):
        self.warmup, self.batch = warmup, batch
        self.start = time.perf_counter()
        self.marks: list[float] = []

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def result(self) -> dict:
        count = len(self.marks) - self.warmup
        since = self.marks[self.warmup - 1] if self.warmup else self.start
        seconds = self.marks[-1] - since
        return {"images_per_s": count * self.batch / seconds, "first_batch_s": self.marks[0] - self.start,
                "timed_batches": count, "timed_seconds": seconds}


def _run_mode(mode: str, plain: dict) -> dict:
    from app.augment import Augmenter
    from app.data import load_source

    data, queue, bench = plain["data"], plain["queue"], plain["bench"]
    source = load_source(OmegaConf.create(data))
    augmenter = Augmenter(plain["augment"]["transforms"], data["image_size"], draft=data["decode"]["draft"],
                          max_pixels=data["max_image_pixels"])
    batch, total = data["batch_size"], bench["warmup"] + bench["batches"]
    order = _order(len(source.train), batch, batch * total, plain["seed"], queue["shuffle"])
    clock = _Clock(bench["warmup"], batch)
    runner = {"baseline": _baseline, "loader_steps": _loader_steps, "loader_fit": _loader_fit, "loader": _loader,
              "keras_threads": _keras, "keras_processes": _keras, "serial": _serial}[mode]
    runner(mode, plain, source, augmenter, order, clock)
    return clock.result()


def _order(n: int, batch: int, needed: int, seed: int, shuffle: bool):
    """(epoch, sample index) pairs, epoch after epoch until `needed`, full batches only (as
    training takes them), so every timed batch holds `batch` images."""
    import numpy as np

    from app.loader.order import epoch_order

    pairs, epoch = [], 0
    while len(pairs) < needed:
        order = epoch_order(n, batch, seed=seed, epoch=epoch, shuffle=shuffle, drop_last=True)
        pairs += [(epoch, int(i)) for i in order]
        epoch += 1
    return np.array(pairs[:needed])


def _enqueuer(plain, source, augmenter):
    from app.loader.pipeline import build_loader

    return build_loader(plain, {"train": (source.train, plain["augment"]["transforms"])})


def _loader_batches(enqueuer, order):
    """This loader's batches over `order`, one epoch's pass after another."""
    from app.loader.pipeline import batches

    epochs = order[:, 0]
    for epoch in sorted(set(epochs.tolist())):
        indices = order[epochs == epoch, 1]
        yield from batches(enqueuer, "train", indices, int(epoch))


def _trivial_model(plain, num_classes, normalising=True):
    """The same trivial backbone for every mode; this loader's modes put `train`'s
    normalising first layer in front (its batches are uint8), Keras's get float32."""
    import keras

    from app.model import classifier

    size = plain["data"]["image_size"]
    net = keras.Sequential([keras.Input((*size, 3)), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(num_classes, activation="softmax")])
    if normalising:
        net = classifier(net, size)
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return net


def _timing_callback(clock):
    import keras

    class Tick(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            clock.tick()

    return Tick()


def _baseline(mode, plain, source, augmenter, order, clock):
    import numpy as np
    import tensorflow as tf

    data = plain["data"]
    net = _trivial_model(plain, len(source.class_names))
    x = np.zeros((data["batch_size"], *data["image_size"], 3), np.uint8)
    y = np.zeros((data["batch_size"],), np.int64)
    clock.start = time.perf_counter()
    net.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), steps_per_epoch=len(order) // data["batch_size"],
            epochs=1, verbose=0, callbacks=[_timing_callback(clock)])


def _loader_steps(mode, plain, source, augmenter, order, clock):
    import keras

    from app.training.steps import train_epoch

    net = _trivial_model(plain, len(source.class_names))
    clock.start = time.perf_counter()
    with _enqueuer(plain, source, augmenter) as enqueuer:
        train_epoch(net, _loader_batches(enqueuer, order),
                    keras.callbacks.CallbackList([_timing_callback(clock)], model=net))


def _loader_fit(mode, plain, source, augmenter, order, clock):
    import tensorflow as tf

    data = plain["data"]
    net = _trivial_model(plain, len(source.class_names))
    signature = (tf.TensorSpec((None, *data["image_size"], 3), tf.uint8), tf.TensorSpec((None,), tf.int64))
    clock.start = time.perf_counter()
    with _enqueuer(plain, source, augmenter) as enqueuer:
        dataset = tf.data.Dataset.from_generator(
            lambda: _loader_batches(enqueuer, order), output_signature=signature)
        net.fit(dataset, steps_per_epoch=len(order) // data["batch_size"], epochs=1, verbose=0,
                callbacks=[_timing_callback(clock)])


def _loader(mode, plain, source, augmenter, order, clock):
    clock.start = time.perf_counter()
    with _enqueuer(plain, source, augmenter) as enqueuer:
        for _ in _loader_batches(enqueuer, order):
            clock.tick()


def _serial(mode, plain, source, augmenter, order, clock):
    from app.loader.worker import make_sample, prepare_process

    prepare_process()  # single-threaded and keeping freed memory, as a worker is: the per-core rate

    batch = plain["data"]["batch_size"]
    clock.start = time.perf_counter()
    for k, (epoch, index) in enumerate(order, start=1):
        make_sample(source.train, augmenter, int(index), plain["seed"], int(epoch))
        if k % batch == 0:
            clock.tick()


def _keras(mode, plain, source, augmenter, order, clock):
    from app.commands.keras_baseline import KerasBaseline

    data, queue = plain["data"], plain["queue"]
    net = _trivial_model(plain, len(source.class_names), normalising=False)
    clock.start = time.perf_counter()
    dataset = KerasBaseline(source.train, augmenter, order, data["batch_size"], plain["seed"],
                            workers=max(queue["workers"], 1), use_multiprocessing=mode == "keras_processes",
                            max_queue_size=queue["max_size"])
    net.fit(dataset, epochs=1, verbose=0, callbacks=[_timing_callback(clock)])
