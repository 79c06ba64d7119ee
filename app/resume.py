"""`resume=<run dir>` and `resume=latest`: continue a run in its own directory.

The command word resolves `resume` before Hydra makes a directory and points Hydra's run
directory at it (and keeps Hydra from rewriting its `.hydra/`). The task then takes the
config from the checkpoint: only what is safe to change may be overridden.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from app.errors import ConfigError

SAFE_PREFIXES = ("trainer.epochs", "queue.")


def prepare_argv(argv: list[str], outputs: Path = Path("outputs"), *, subdir: str | None = None) -> list[str]:
    """Rewrite the overrides of a command on an existing run; others come back unchanged.
    `train` continues in the run directory itself; `evaluate` and `predict` (`subdir`) write
    into `<run dir>/<subdir>/<date>_<time>/` and need `resume`."""
    value = None
    for arg in argv:
        if arg.lstrip("+").startswith("resume="):
            value = arg.split("=", 1)[1]
    if value in (None, "", "null", "None"):
        if subdir:
            raise ConfigError(f"config key `resume` is missing: `{subdir}` works on a training run, e.g. "
                              f"python -m app {subdir} resume=outputs/<date>/<time> (or resume=latest).")
        return argv
    if "-m" in argv or "--multirun" in argv:
        raise ConfigError("config key `resume` cannot be used with -m: resume one run at a time.")
    run_dir = latest_run(outputs) if value == "latest" else Path(value).expanduser().resolve()
    if not (run_dir / "checkpoints").is_dir():
        raise ConfigError(f"config key `resume` = {value!r} is not allowed: {run_dir} is not a run directory with "
                          "checkpoints/ (give a directory under outputs/ that a training run wrote, or `latest`).")
    kept = [a for a in argv if not a.lstrip("+").startswith("resume=")]
    where = f"{run_dir}/{subdir}/${{now:%Y-%m-%d_%H-%M-%S}}" if subdir else str(run_dir)
    return [*kept, f"resume={run_dir}", f"hydra.run.dir={where}", "hydra.output_subdir=null"]


def latest_run(outputs: Path) -> Path:
    """The training run under `outputs` whose newest checkpoint is the newest of all."""
    states = list(Path(outputs).glob("**/checkpoints/step-*/state.json"))
    if not states:
        raise ConfigError(f"config key `resume` = 'latest' is not allowed: no training run under "
                          f"{Path(outputs).resolve()} has a checkpoint.")
    newest = max(states, key=lambda p: p.stat().st_mtime)
    return newest.parent.parent.parent.resolve()


def resumed_config(saved: dict, cfg: DictConfig, overrides: list[str],
                   safe: tuple[str, ...] = SAFE_PREFIXES) -> DictConfig:
    """The checkpoint's config, with the overrides that are safe applied; anything else is an error."""
    result = OmegaConf.create(saved)
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key == "resume":
            continue
        if not key.startswith(safe):
            allowed = ", ".join(f"{s}*" if s.endswith(".") else s for s in safe)
            raise ConfigError(f"config key `{key}` cannot change for a run that exists (its config is the one it "
                              f"was trained with); only {allowed} may. Start a new run for other settings.")
        OmegaConf.update(result, key, OmegaConf.select(cfg, key), merge=False)
    result.resume = cfg.resume
    return result
