"""`python -m app bench [overrides]`: times the input pipeline alone, this loader against its peers (the modes:
docs/performance.md), each in a fresh process, then (bench.memory) again to sample its memory; writes bench.json."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import multiprocessing as mp
from contextlib import nullcontext
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.augment import build_compose
from app.bench import copies, modes
from app.capacity.auto import loading_only
from app.capacity.memory import PeakMemory
from app.commands import failure_carried
from app.config import conf_dir, load, to_plain
from app.data.pixels.pixels import run_pixels
from app.errors import AppError, config_error
from app.frameworks import install_command, use_backend, versions
from app.io import write_json
from app.loader.settings import Queue, Settings, ring_slots
from app.redact import redacted
from app.runs.rundata import check_stored_sizes, checked_source
from app.runs.rundir import hardware
from app.schema import BENCH_MODES, register
from app.schema.data import patches_of

register()
log = logging.getLogger("app.bench")
KERAS_MODES = ("keras_threads", "keras_processes")
TENSORFLOW_MODES = ("tf_data",)  # tf.data is TensorFlow's own, whatever Keras's backend
# a hand-written reader of slides' regions, and the slides predicted whole: data.patches only, never on a copy
REGION_MODES = ("keras_regions", "slide_predict", "keras_slide_loop")
MEMORY_KEYS = ("peak_memory_mb", "memory_samples", "memory_reads", "peak_pss_mb", "pss_samples", "pss_reads")


@hydra.main(config_path=str(conf_dir()), config_name="bench", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> None:
    config = load(cfg)
    queue = loading_only(config.queue)  # `auto`: no training step here to balance; every mode runs this one
    runnable = _runnable_modes(config.bench.modes, patches=patches_of(config.data) is not None)
    if set(runnable) - set(modes.PLAIN_MODES):  # a mode with a model: its process loads Keras
        use_backend(config.trainer)  # KERAS_BACKEND, which the modes' processes inherit
    bench = config.bench
    build_compose(config.augment.transforms, config.data.image_size)
    source = checked_source(config)  # generates the synthetic data once, before any timing
    if len(source.train) < config.data.batch_size:  # no full batch: no mode could ever time one
        raise config_error("data.batch_size", config.data.batch_size,
                           f"at most the {len(source.train)} samples of the training split: bench times full "
                           f"batches, as training takes them. Lower data.batch_size, or bench more images")
    needed = (bench.warmup + bench.batches) * config.data.batch_size
    log.info("bench on %s: %d training samples, %d needed a mode (epochs repeat when fewer)", source.name,
             len(source.train), needed)
    slots, capped = ring_slots(queue.max_size, {"train": len(source.train)}, config.data.batch_size)
    if capped:  # said here: the modes' processes log warnings only
        log.info(capped)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    benched = [(None, config)] + [(copy, _copy_checked(config, copy, source)) for copy in copies.labels(config.bench)]
    results = {}
    for copy, variant in benched:
        for mode in runnable:
            if copy is not None and mode in REGION_MODES:  # a copy holds patches, not slides to read regions of
                continue
            name = copies.row_name(mode, copy)
            results[name] = _measured(mode, variant, queue, run_dir / "bench.log")
            log.info("%-16s %s", name, _line(results[name]))
    plain = redacted(to_plain(config))
    plain["queue"].update(workers=queue.workers, max_size=queue.max_size)  # as the modes ran: `auto` resolved
    plain["bench"]["modes"] = runnable
    batch = dataclasses.replace(Settings.of(config.data, queue, pixels=run_pixels(config.data, source.train)),
                                mask_dtype=source.train.mask_dtype)  # the ring's batch: its masks too, as the loader's
    derived = {**_derived(results, batch, slots),
               **copies.ratios(results, runnable, copies.labels(config.bench))}
    report = {"results": results, "config": {k: plain[k] for k in ("data", "augment", "queue", "bench", "seed")},
              "derived": derived, "versions": versions(), "hardware": hardware(),
              "overrides": redacted(list(HydraConfig.get().overrides.task))}
    write_json(run_dir / "bench.json", report)
    print(_table(results, report["derived"]))
    print(f"\nwritten: {run_dir / 'bench.json'}")
    _raise_if_all_failed(results, run_dir)


def tensorflow_installed() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def _runnable_modes(asked: list[str], *, patches: bool) -> list[str]:
    """`asked` less modes needing an absent TensorFlow or patches (noted); a ConfigError if not the default modes."""
    default, regions = list(asked) == BENCH_MODES, [mode for mode in asked if mode in REGION_MODES]
    if regions and not patches:
        if not default:
            raise config_error("bench.modes", list(asked), f"{', '.join(regions)} reads patches of slides: set "
                               "data.patches.size (docs/slides.md), or leave it out of bench.modes")
        asked = [mode for mode in asked if mode not in REGION_MODES]
    needing = [mode for mode in asked if mode in TENSORFLOW_MODES]
    if not needing or tensorflow_installed():
        return list(asked)
    if not default:
        raise config_error("bench.modes", list(asked),
                           f"{', '.join(needing)} times tf.data, which needs the package `tensorflow`, and it is not "
                           f"installed here (on trainer.backend=jax too): {install_command('tensorflow')}, or leave "
                           f"{', '.join(needing)} out of bench.modes")
    log.info("bench leaves %s out of its default modes: it times tf.data, which needs the package `tensorflow`, "
             "not installed here (%s brings it)", ", ".join(needing), install_command("tensorflow"))
    return [mode for mode in asked if mode not in TENSORFLOW_MODES]


def _copy_checked(config, copy: str, source):
    """The config that benches prepared copy `copy`, refused before any timing when it is of other data or too small."""
    variant = copies.copy_config(config, copy)
    check_stored_sizes(variant, copies.copy_source_of(config, copy, source))
    return variant


def _measured(mode: str, config, queue: Queue, log_path: Path) -> dict:
    """`mode` timed in its own process running `queue`, then (bench.memory) run again for its peak memory."""
    result = _spawn_mode_killing_it_if_hung(mode, config, queue, log_path, sampled=False)
    if config.bench.memory and "error" not in result:
        sampled = _spawn_mode_killing_it_if_hung(mode, config, queue, log_path, sampled=True)
        if "error" in sampled:
            result["memory_error"] = sampled["error"]
        else:
            result.update({key: sampled[key] for key in MEMORY_KEYS}, sampled_images_per_s=sampled["images_per_s"])
    return result


def _raise_if_all_failed(results: dict, run_dir: Path) -> None:
    """Nothing was measured: an error (a non-zero exit) that gives the first mode's reason."""
    if any("error" not in result for result in results.values()):
        return
    mode, first = next(iter(results.items()))
    raise AppError(f"every bench mode failed, so nothing was measured; the first, {mode}: "
                   f"{first['error'].rstrip('.')}. Each mode's error and traceback are in {run_dir / 'bench.json'} "
                   f"(results.<mode>.traceback) and {run_dir / 'bench.log'}: fix what they say and run bench again.")


def _spawn_mode_killing_it_if_hung(mode: str, config, queue: Queue, log_path: Path, *, sampled: bool) -> dict:
    """One run of `mode` in a fresh process running `queue`; with `sampled`, its tree's memory every 100 ms."""
    context = mp.get_context("spawn")
    parent_end, child_end = context.Pipe(duplex=False)
    process = context.Process(target=modes.child_main, args=(mode, config, queue, child_end, str(log_path)),
                              name=f"bench-{mode}")
    process.start()
    child_end.close()
    with PeakMemory(pid=process.pid) if sampled else nullcontext() as memory:
        result = parent_end.recv() if parent_end.poll(timeout=1800) else {"error": "timed out after 30 min"}
        process.join(timeout=60)
    if process.is_alive():
        # said, as the minute waited is the user's: a mode's process that hangs on its way out
        log.warning("bench mode %s: its process sent its result but did not exit within 60 s; killed", mode)
        process.kill()
    if sampled:
        result.update(_memory_figures(memory))
    return result


def _memory_figures(memory) -> dict:
    """The sampled run's memory as bench.json keeps it, also under the old `pss` names for scripts that read them."""
    figures = {"peak_memory_mb": memory.peak / 2**20, "memory_samples": memory.samples,
               "memory_reads": memory.private_reads}
    return {**figures, "peak_pss_mb": figures["peak_memory_mb"], "pss_samples": memory.samples,
            "pss_reads": memory.private_reads}


def _line(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error']}"
    return (f"{result['images_per_s']:8.1f} img/s, first batch {result['first_batch_s']:.2f} s, "
            f"peak memory {_mib(result)}{' MiB' if 'peak_memory_mb' in result else ''}")


def _mib(result: dict) -> str:
    """Peak memory as a table shows it: not measured with `bench.memory=false`, or the sampled run's error."""
    if "peak_memory_mb" in result:
        return f"{result['peak_memory_mb']:.0f}"
    return f"failed: {result['memory_error']}" if "memory_error" in result else "-"


def _derived(results: dict, batch: Settings, slots: int) -> dict:
    """The targets' figures: the ring's `slots` (as queue.max_size caps them) of `batch`'s batches, its workers."""
    ok, workers = {m: r for m, r in results.items() if "error" not in r}, batch.queue.workers
    images = dataclasses.replace(batch, mask_dtype=None).batch_bytes
    # the batch a Keras peer hands fit: its images in float32, their masks (if any) as they are
    float32 = 4 * images // np.dtype(batch.pixels.dtype).itemsize + batch.batch_bytes - images
    derived: dict = {"queue_bytes": slots * batch.batch_bytes, "float32_batch_bytes": float32}
    keras_best = max((ok[m]["images_per_s"] for m in KERAS_MODES if m in ok), default=None)
    if keras_best:
        derived["keras_best_images_per_s"] = keras_best
        for mode in ("loader_steps", "loader_fit"):
            if mode in ok:
                derived[f"{mode}_vs_keras_best"] = ok[mode]["images_per_s"] / keras_best
    if "tf_data" in ok:
        for mode in ("loader_steps", "loader_fit"):
            if mode in ok:
                derived[f"{mode}_vs_tf_data"] = ok[mode]["images_per_s"] / ok["tf_data"]["images_per_s"]
    if "keras_regions" in ok:  # patches: the app's reading of regions against a hand-written PyDataset's
        for mode in ("loader_steps", "loader_fit", "loader"):
            if mode in ok:
                derived[f"{mode}_vs_keras_regions"] = ok[mode]["images_per_s"] / ok["keras_regions"]["images_per_s"]
    if "slide_predict" in ok and "keras_slide_loop" in ok:  # tiles a second, on the same slides
        derived["slide_predict_vs_keras_slide_loop"] = (ok["slide_predict"]["images_per_s"]
                                                        / ok["keras_slide_loop"]["images_per_s"])
    if "serial" in ok and "loader" in ok and workers:
        ideal = ok["serial"]["images_per_s"] * workers
        derived["loader_vs_serial_times_workers"] = ok["loader"]["images_per_s"] / ideal
    peaks = {m: r["peak_memory_mb"] for m, r in ok.items() if "peak_memory_mb" in r}
    if "baseline" in peaks:
        bound = (peaks["baseline"] + 120 * workers
                 + (derived["queue_bytes"] + 2 * derived["float32_batch_bytes"]) / 2**20)
        derived["memory_bound_mb"] = bound
        for mode in ("loader_steps", "loader_fit"):
            if mode in peaks:
                derived[f"{mode}_peak_within_bound"] = peaks[mode] <= bound
    for peer in ("keras_processes", "tf_data"):
        for mode in ("loader_steps", "loader_fit"):
            if peer in peaks and mode in peaks:
                derived[f"{mode}_peak_vs_{peer}"] = peaks[mode] / peaks[peer]
    return derived


def _table(results: dict, derived: dict) -> str:
    rows = ["| mode | images/s | first batch (s) | peak memory (MiB) |", "|---|---:|---:|---:|"]
    for mode, r in results.items():
        if "error" in r:
            rows.append(f"| {mode} | failed: {r['error']} | | |")
        else:
            rows.append(f"| {mode} | {r['images_per_s']:.1f} | {r['first_batch_s']:.2f} | {_mib(r)} |")
    rows.append("")
    rows += [f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in derived.items()]
    return "\n".join(rows)

