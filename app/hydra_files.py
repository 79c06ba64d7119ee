"""What Hydra itself writes of a command's config and command line, redacted (app/redact.py's
rule): `RedactSecrets`, Hydra's callback in conf/common.yaml.

Where Hydra writes them (hydra/core/utils.py `run_job`, its basic sweeper; Hydra 1.3):
- `<run dir>/<hydra.output_subdir>/config.yaml`, `hydra.yaml` (hydra.overrides.task,
  hydra.job.override_dirname) and `overrides.yaml`: written after the job's logging is set up
  and just before `on_job_start`, the first moment a callback may touch them.
- `<sweep dir>/multirun.yaml`: saved by the sweeper after `on_multirun_start`, from the config
  whose hydra.overrides.task it then sweeps (so that config cannot be redacted before), before
  the first job. Each job's `on_job_start` rewrites it where it holds a secret; `train
  resume=<sweep dir>` runs its overrides again, <redacted> and all, and app/config.py's `load`
  takes those values out (the environment's credentials apply) and says so.
No file is written with a secret longer than those moments; the task function is given the real
values, which never come from these files. The log is redacted by a filter on Hydra's handlers
(conf/common.yaml: hydra.job_logging, hydra.hydra_logging; app/redact.py `RedactingFilter`).
Orchestration only: never imports TensorFlow, Keras or the loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from app.io import atomic_write
from app.redact import redacted

# the files Hydra writes into a job's output_subdir (hydra/core/utils.py run_job)
JOB_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
SWEEP_FILE = "multirun.yaml"  # the sweeper's, in the sweep's folder


class RedactSecrets(Callback):
    """Rewrites Hydra's files of a job (and its sweep's multirun.yaml) redacted, as soon as Hydra
    has written them."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        subdir = config.hydra.output_subdir
        if subdir is not None:
            folder = Path(config.hydra.runtime.output_dir) / str(subdir)
            for name in JOB_FILES:
                rewrite_redacted(folder / name)
        if config.hydra.mode == RunMode.MULTIRUN:
            rewrite_redacted(Path(config.hydra.sweep.dir) / SWEEP_FILE)


def rewrite_redacted(path: Path) -> bool:
    """The YAML file at `path` written again, atomically, redacted, when it holds a secret;
    whether it did. Missing: nothing to do."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    content = yaml.safe_load(text)
    clean = redacted(content)
    if clean == content:
        return False
    with atomic_write(path, encoding="utf-8") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.create(clean)))
    return True
