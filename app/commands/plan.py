"""`python -m app plan [overrides]`: the memory a training run of this config (or, with `resume=`, a saved run's) will
take, host part by part and device apart, its host peak against `queue.memory_budget_mb` or the memory available, and
one batch's size by batch × resolution, into plan.json. Reads only image headers unless queue.* is `auto`."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.capacity import queue_plan
from app.capacity.auto import asked
from app.capacity.probe import measured_or_spawn_probe
from app.capacity.run_plan import RunPlan
from app.commands import failure_carried
from app.config import conf_dir, load
from app.data.pixels.pixels import run_pixels
from app.data.slides.patches import PatchSplit
from app.data.sources import cifar, synthetic
from app.data.sources.chosen import load_or_generate_source
from app.errors import DataError
from app.frameworks import load_keras, native_stderr_to_log, use_backend
from app.inference.slide_masks import band_bytes, tiling_of
from app.io import write_json
from app.runs import checkpoint
from app.runs.rundata import check_stored_sizes, run_source
from app.runs.saved import latest_run, resumed_config
from app.schema import DATA_TARGETS, SlidePredictConfig, register
from app.schema.data import patches_of
from app.tasks import task_of

log = logging.getLogger("app.plan")
register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> float:
    config, run_dir = _config(cfg)
    use_backend(config.trainer)
    source = _source(config.data, run_dir)
    check_stored_sizes(config, source)
    load_keras()  # quietly, before calibration imports it
    from app.training import calibration  # imports Keras: after load_keras

    # here, unlike train, a plan is the point: a failed probe is the command's error
    probe = measured_or_spawn_probe(calibration.trainer_measures)
    pixels = run_pixels(config.data, source.train)
    net, gpus = _model(config, source, pixels)
    given = asked(config.queue, gpus)
    if given.reason:
        print(f"{given.reason}\n")
    run = RunPlan.of(config.data, device_is_host=not gpus, pixels=pixels, asked=given)
    plans = calibration.planner(config, run, source, net)
    plan = calibration.probed(plans, source.train, net)
    choice = plan.choice
    if choice:
        print(f"queue.workers={plan.queue.workers} queue.max_size={plan.queue.max_size} "
              f"(auto, from a probe of the data and the step: {choice.reason})\n")
    text, record = queue_plan.report(plan, plans)
    print(text)
    slides = _slides_whole(patches_of(config.data), source.val, len(source.class_names), record["host_peak_mib"])
    out = Path(HydraConfig.get().runtime.output_dir) / "plan.json"
    write_json(out, {**record, "gpus": gpus, "probe": probe.__dict__,
                     "queue_auto": choice.record() if choice else None, **slides})
    print(f"\nwritten: {out}")
    return record["host_peak_mib"]


def _slides_whole(patches, val, classes: int, host_mib: float) -> dict:
    """A segmentation run on slides: what predicting a slide whole (predict, evaluate) adds to the host, its band of
    tile rows on the widest validation slide, printed; plan.json's `predict_slides`. Else nothing."""
    if not isinstance(val, PatchSplit) or val.masks is None:
        return {}
    tilings = [tiling_of(path, patches, SlidePredictConfig().overlap) for path in val.images.paths]
    widest = max(tilings, key=lambda tiling: tiling.shape[1])
    band = band_bytes(widest, classes) / 2**20
    print(f"\npredicting a slide whole (predict, evaluate): + {band:.0f} MiB, a band of {widest.tile[0]} rows of "
          f"its {widest.shape[1]:,}-pixel-wide map's scores ({classes} classes) on the widest validation slide; "
          f"host peak {host_mib + band:,.0f} MiB")
    return {"predict_slides": {"band_mib": round(band, 1), "host_peak_mib": round(host_mib + band, 1),
                               "widest": widest.layout.slide.path, "map_width": widest.shape[1]}}


def _config(cfg: DictConfig):
    """(the config to plan, the run directory it comes from or None); with `resume`, as `train resume=` reads it."""
    if not cfg.resume:
        return load(cfg), None
    run_dir = latest_run(Path("outputs")) if cfg.resume == "latest" else Path(cfg.resume).expanduser().resolve()
    if not (run_dir / "checkpoints").is_dir():
        raise checkpoint.nothing_to_resume(run_dir)
    saved = resumed_config(checkpoint.saved_config(run_dir), cfg, list(HydraConfig.get().overrides.task))
    log.info("planning %s's config (with the overrides `train resume=` takes)", run_dir)
    return load(saved), run_dir


def _source(data, run_dir: Path | None):
    """The data source, never written (one to generate or download is a DataError); a run's, checked to be its own."""
    if data._target_ == DATA_TARGETS["synthetic"]:
        folders = [Path(data.path).expanduser() / spec.folder_name() for spec in synthetic.specs(data)]
        missing = [str(folder) for folder in folders if not folder.is_dir()]
        if missing:
            raise DataError(f"the synthetic dataset is not generated yet ({' and '.join(missing)} missing), and "
                            "plan never writes a dataset: `python -m app train` with the same data.* overrides "
                            "generates it (then plan again)")
    if data._target_ == DATA_TARGETS["cifar"] and not cifar.is_found(data):
        raise DataError(f"{cifar.not_found(data)} (plan never downloads: `python -m app train data=cifar "
                        "data.download=true` fetches it)")
    return run_source(run_dir, data) if run_dir else load_or_generate_source(data)


def _model(config, source, pixels):
    """(the model built and compiled as `train` builds it, on one device; the GPUs the backend sees)."""
    keras = load_keras()  # first: app.model imports Keras, whose start-up lines go to the log only from here
    from app.training import recipe  # imports Keras: after load_keras

    with native_stderr_to_log():  # the first device query prints CUDA's "no GPU" lines natively
        if config.trainer.backend == "jax":
            import jax

            gpus = [str(d) for d in jax.devices() if d.platform in ("gpu", "tpu")]
        else:
            import tensorflow as tf

            gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
    keras.mixed_precision.set_global_policy(config.trainer.precision.value)
    steps = config.trainer.steps_per_epoch or max(1, len(source.train) // config.data.batch_size)
    head = recipe.Head(source.class_names, task_of(config.data.task), ignore_index=config.data.ignore_index)
    return recipe.new_compiled_model(config, head, steps, pixels), gpus
