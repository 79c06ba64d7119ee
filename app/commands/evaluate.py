"""`python -m app evaluate resume=<run dir>`: the run's last epoch-end checkpoint on its own
validation split (split.json): loss, accuracy, a confusion matrix printed and as PNG.
Writes into <run dir>/evaluate/<date>_<time>/. A command: imported by app/__main__.py only,
never by the loader, the model or training."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.config import conf_dir
from app.schema import register

register()
log = logging.getLogger("app.evaluate")


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from app.frameworks import load_keras
    from app.loader.pipeline import build_loader, every_sample
    from app.training.resume import last_epoch_checkpoint, open_run
    from app.training.rundir import run_source, write_json
    from app.training.steps import evaluate

    load_keras()
    run_dir, config = open_run(cfg, safe=("queue.",))
    out = Path(HydraConfig.get().runtime.output_dir)
    source = run_source(run_dir, config.data)
    path, net = last_epoch_checkpoint(run_dir)
    log.info("evaluating %s on %d validation samples of %s", path, len(source.val), source.name)
    names = source.class_names
    confusion = np.zeros((len(names), len(names)), np.int64)
    with build_loader(config, {"val": (source.val, [])}) as loader:
        figures = evaluate(net, every_sample(loader, "val"), confusion)  # training's own validation
    result = {"checkpoint": str(path), "loss": figures.loss, "accuracy": figures.accuracy,
              "samples": int(figures.images), "class_names": names, "confusion": confusion.tolist()}
    write_json(out / "evaluation.json", result)
    _plot(confusion, names, out / "confusion.png", result)
    print(f"checkpoint {path.name}: loss {result['loss']:.4f}, accuracy {result['accuracy']:.4f} "
          f"on {result['samples']} validation samples\n")
    print(_table(confusion, names))
    print(f"\nwritten: {out / 'evaluation.json'}, {out / 'confusion.png'}")
    return result["accuracy"]


def _table(confusion: np.ndarray, names: list[str]) -> str:
    width = max(8, *(len(n) for n in names))
    head = "true \\ predicted".ljust(width) + "".join(n[:width].rjust(width + 1) for n in names)
    rows = [n.ljust(width) + "".join(str(v).rjust(width + 1) for v in row)
            for n, row in zip(names, confusion, strict=True)]
    return "\n".join([head, *rows])


def _plot(confusion: np.ndarray, names: list[str], path: Path, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(confusion, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"accuracy {result['accuracy']:.3f} on {result['samples']} samples")
    for (i, j), value in np.ndenumerate(confusion):
        ax.text(j, i, str(value), ha="center", va="center",
                color="white" if value > confusion.max() / 2 else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
