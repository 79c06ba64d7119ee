"""`python -m app export resume=<run dir> export.format=tf_saved_model|onnx|litert [checkpoint=...]`: the run's model
as a graph from uint8 images to probabilities (+ labels.txt, preprocessing.json, export.json) in export.out."""
# published only if it matches Keras on validation within export.tolerance; other files there refused (overwrite=true:
# moved aside)

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.augment import eval_transforms
from app.capacity.auto import loading_only
from app.commands import failure_carried
from app.config import conf_dir
from app.errors import ConfigError, DataError, config_error
from app.frameworks import install_command, native_stderr_to_log, versions
from app.inference.opened import keras_for_run
from app.io import is_url, write_json
from app.loader.pipeline import build_loader
from app.runs.export_folder import RECORD, check_out, publish_moving_aside
from app.runs.rundata import checked_source
from app.runs.saved import STORAGE, read_run_setting_backend
from app.schema import EXPORT_TOLERANCE, Backend, register
from app.tasks import Task, task_of

register()
log = logging.getLogger("app.export")
# export.format → the modules its exporter and its runtime need (the `export` extra), by import name
NEEDS = {"tf_saved_model": (), "onnx": ("tf2onnx", "onnx", "onnxruntime"), "litert": ("ai_edge_litert",)}
PACKAGES = {"tf2onnx": "tf2onnx", "onnx": "onnx", "onnxruntime": "onnxruntime", "ai_edge_litert": "ai-edge-litert"}


@hydra.main(config_path=str(conf_dir()), config_name="export", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> dict:
    fmt, tolerance = checked_format(cfg.export)  # before the run is read and Keras loads: a refusal comes at once
    # whatever the run trained on: its model.keras is Keras's
    run_dir, config = read_run_setting_backend(cfg, safe=("queue.", "augment.eval_", "data.max_image_pixels",
                                                          STORAGE, "overwrite"), backend=Backend.tensorflow)
    out = Path(cfg.export.out or run_dir / "export" / fmt).expanduser().resolve()
    check_out(out, run_dir, fmt, cfg.overwrite)
    source = checked_source(config, run_dir)
    task = task_of(config.data.task)
    output = task.export_output(run_dir, source.class_names, config.trainer)  # a wrong thresholds.json: said now
    keras_for_run()
    from app.inference import exporting, restore  # the Keras side: they import Keras, loaded just now on TensorFlow

    restore.builder_imported(config.model)
    model_path, net = chosen_model(restore, run_dir, cfg.checkpoint)
    net = exporting.float32_model(net)
    size = [int(s) for s in net.input_shape[1:3]]
    staging = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # published whole, after its check, or not at all
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        written = exporting.write_format(exporting.integer_model(net), staging, fmt)
        (staging / "labels.txt").write_text("".join(f"{name}\n" for name in source.class_names), encoding="utf-8")
        write_json(staging / "preprocessing.json", {**preprocessing(config.augment, size),
                                                    **exporting.integer_input(net), **output})
        split = source.val if cfg.export.samples is None else source.val.take(np.arange(
            min(int(cfg.export.samples), len(source.val))))
        log.info("checking %s against %s on %d validation samples", written, model_path, len(split))
        queue = loading_only(config.queue)
        with build_loader(config, {"val": (split, eval_transforms(config.augment, size))}, queue=queue,
                          on_bad_sample="mark") as loader, native_stderr_to_log():  # LiteRT's delegate line
            parity = compared(exporting.runtime(written, fmt), net, loader.readable("val"), task=task, output=output)
        record = {"format": fmt, "path": str(out / written.name), "model": str(model_path), "image_size": size,
                  "class_names": source.class_names, "parity": {**parity, "tolerance": tolerance,
                                                                "passed": parity["max_abs_difference"] <= tolerance},
                  "sizes": {"export_bytes": size_of(written), "model_keras_bytes": size_of(model_path),
                            "parameters": int(net.count_params())}, "versions": versions(format_packages(fmt))}
        write_json(Path(HydraConfig.get().runtime.output_dir) / "export.json", record)
        _print(record, task)
        refuse_difference(record, out, task)
        write_json(staging / RECORD, record)
        check_out(out, run_dir, fmt, cfg.overwrite)  # again: what is there may have changed since
        publish_moving_aside(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"written: {out} ({written.name}, labels.txt, preprocessing.json, export.json)")
    return record


def refuse_difference(record: dict, out: Path, task: Task) -> None:
    """A DataError when the export's probabilities differ from Keras's by more than the tolerance."""
    parity, fmt = record["parity"], record["format"]
    if parity["passed"]:
        return
    raise DataError(f"the {fmt} export of {record['model']} predicts differently from Keras: the largest difference "
                    f"of probabilities is {parity['max_abs_difference']:.3g} over {parity['samples']} validation "
                    f"samples, above export.tolerance={parity['tolerance']:g} ({agreement(parity, task)}). It was not "
                    f"written to {out}; the figures are in "
                    f"{HydraConfig.get().runtime.output_dir}/export.json. Raise export.tolerance if that difference "
                    "is acceptable where it will run, or try another export.format.")


def checked_format(export) -> tuple[str, float]:
    """(export.format, its tolerance) once both are allowed and the format's packages are installed."""
    fmt = export.format
    if fmt not in EXPORT_TOLERANCE:
        raise config_error("export.format", fmt, ", ".join(EXPORT_TOLERANCE))
    tolerance = EXPORT_TOLERANCE[fmt] if export.tolerance is None else float(export.tolerance)
    if not tolerance >= 0:
        raise config_error("export.tolerance", export.tolerance, "null (1e-4; litert 1e-3) or a number from 0")
    if export.samples is not None and int(export.samples) < 1:
        raise config_error("export.samples", export.samples, "null (every validation sample) or a number from 1")
    if export.out and is_url(export.out):
        raise config_error("export.out", export.out, "a local folder (copy the export up once it is written)")
    if not installed("tensorflow"):  # a `.[jax]` install
        raise ConfigError("export needs TensorFlow, not installed in this environment: Keras's exporters trace the "
                          f"model with it, whatever backend the run trained on. {install_command('tensorflow,export')} "
                          "installs it with the export tools, then run export again.")
    missing = [PACKAGES[name] for name in NEEDS[fmt] if not installed(name)]
    if missing:
        raise ConfigError(f"export.format={fmt} needs {', '.join(missing)}, not installed in this environment: "
                          f"{install_command('export')} installs the export extra (tf2onnx>=1.17, onnx, onnxruntime, "
                          "ai-edge-litert), then run export again. export.format=tf_saved_model needs none of them.")
    return fmt, tolerance


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module that is there but cannot be found or imported
        return False


def chosen_model(restore, run_dir: Path, checkpoint: str | None) -> tuple[Path, object]:
    """(its path, the model) of `checkpoint=`: null, the run's model.keras; else as evaluate's."""
    if checkpoint is None:
        net, _ = restore.load_model_keras(run_dir)
        return run_dir / "model.keras", net
    path, net = restore.chosen_checkpoint(run_dir, checkpoint)
    return path / "model.keras", net


def compared(predict, net, batches, *, task: Task, output: dict) -> dict:
    """Largest gap of `predict`'s probabilities from `net`'s, their agreement (the task's); DataError if none read."""
    worst, agreeing, samples = 0.0, 0.0, 0
    for images, _, _ in batches:
        images = np.ascontiguousarray(images)  # the loader's integers, uint8 or uint16
        theirs = np.asarray(predict(images), np.float32)
        ours = np.asarray(net.predict_on_batch(images.astype(np.float32)), np.float32)
        worst = max(worst, float(np.abs(theirs - ours).max()))
        agreeing += task.agreeing(theirs, ours, output)
        samples += len(images)
    if not samples:
        raise DataError("no validation sample could be read for the parity check: run evaluate on this run to see "
                        "which files fail, fix them, then run export again.")
    return {"samples": samples, "max_abs_difference": worst, task.parity_key: agreeing / samples}


def agreement(parity: dict, task: Task) -> str:
    return f"{task.parity_words} {parity[task.parity_key]:.4f}"


def preprocessing(augment, size: list[int]) -> dict:
    """preprocessing.json: what a deployer does to an image before the graph (this run's eval resize)."""
    height, width = size
    if augment.eval_transform == "resize":
        resize = {"method": "resize", "to": [height, width], "keeps_aspect_ratio": False}
    else:
        short = round(max(height, width) / augment.eval_crop_fraction)
        resize = {"method": "short_side_then_center_crop", "short_side": short, "crop": [height, width],
                  "keeps_aspect_ratio": True}
    return {"image_size": [height, width],
            "input": {"dtype": "uint8", "channels": "RGB", "range": [0, 255], "layout": "NHWC (batch, height, "
                      "width, 3)", "batch": "any size (LiteRT: resize the input tensor, or feed one image at a time)"},
            "resize": {**resize, "interpolation": "bilinear (OpenCV INTER_LINEAR)"},
            "normalisation": "inside the graph: feed the uint8 pixels as they are",
            "output": "class probabilities (softmax, float32), in labels.txt's order"}


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def format_packages(fmt: str) -> tuple[str, ...]:
    return ("tensorflow", "keras", *(PACKAGES[name] for name in NEEDS[fmt]))


def _print(record: dict, task: Task) -> None:
    parity = record["parity"]
    print(f"{record['format']}: {parity['samples']} validation samples, largest difference of probabilities "
          f"{parity['max_abs_difference']:.3g} (tolerance {parity['tolerance']:g}), {agreement(parity, task)} against "
          f"{record['model']}")
