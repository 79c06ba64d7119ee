"""`python -m app evaluate resume=<run dir> [split=val|test] [checkpoint=last|best|<name>]`: a checkpoint of the run on
`split`, scored by its task (evaluation.json, report.txt and its own files), into <run dir>/evaluate/<date>_<time>/."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.commands import failure_carried
from app.config import conf_dir
from app.errors import config_error
from app.inference.opened import keras_for_run
from app.rules import predict as slide_rules
from app.runs.rundata import checked_source
from app.runs.saved import STORAGE, read_run_setting_backend
from app.schema import register
from app.tasks import Evaluation, task_of
from app.tracking.mlflow_writer import log_evaluation

register()
log = logging.getLogger("app.evaluate")


@hydra.main(config_path=str(conf_dir()), config_name="evaluate", version_base="1.3")
@failure_carried
def main(cfg: DictConfig) -> float:
    slide_rules.check(cfg.predict)  # the command's own keys, before any work
    # first: it picks the backend Keras loads on
    run_dir, config = read_run_setting_backend(cfg, safe=("queue.", "augment.eval_", "data.max_image_pixels",
                                                          "data.test_path", STORAGE))
    source = checked_source(config, run_dir)  # before Keras loads: a refusal comes at once
    split = {"val": source.val, "test": source.test}.get(cfg.split)
    if split is None:
        raise config_error("split", cfg.split, "val, or test where the data has a test split (data=folder: "
                           "<path>/test/<class>/ beside train/ and val/, or data.test_path; data=table: `test` rows "
                           "in its split column, or data.test_fraction); this run's has none"
                           if cfg.split == "test" else "val or test")
    keras_for_run()
    from app.inference import restore  # the Keras side: Keras loaded just now (its backend)

    out = Path(HydraConfig.get().runtime.output_dir)
    restore.builder_imported(config.model)
    path, net = restore.chosen_checkpoint(run_dir, cfg.checkpoint)
    log.info("evaluating %s on %d %s samples of %s (Keras on %s, one device)", path, len(split), cfg.split,
             source.name, config.trainer.backend.value)
    figure = task_of(config.data.task).evaluate(Evaluation(config=config, source=source, split_name=cfg.split,
                                                           net=net, checkpoint=path, run_dir=run_dir, out=out,
                                                           slides=cfg.predict))
    if config.logger.mlflow is not None:  # the figures and the rest, beside the run's own
        log_evaluation(run_dir, out)
    return figure
