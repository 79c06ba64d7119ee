"""Fine-tuning through the real CLI: a MobileNetV3Small with weights from a file, its backbone
frozen for epoch 1 (BatchNorm statistics included) and trained from epoch 2; a run resumed across
that point ends with the weights of an uninterrupted one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

SMALL = "+model.kwargs={minimalistic: true}"  # new keys of a mapping take `+` in Hydra


def app(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    base = keras.applications.MobileNetV3Small(include_top=False, weights=None, input_shape=(32, 32, 3),
                                               pooling="avg", minimalistic=True)
    weights = root / "start.weights.h5"
    base.save_weights(weights)
    config = ["data.num_images=48", "data.source_size=64", "data.num_classes=3", "data.image_size=[32,32]",
              "data.batch_size=8", "model=keras_app", f"model.weights={weights}", SMALL, "model.freeze_backbone=true",
              "trainer.unfreeze_at_epoch=2", "trainer.deterministic=true", "queue.workers=1"]
    a = app("train", *config, "trainer.epochs=2", "hydra.run.dir=A", cwd=root)
    assert a.returncode == 0, a.stderr[-3000:]
    b = app("train", *config, "trainer.epochs=1", "hydra.run.dir=B", cwd=root)
    assert b.returncode == 0, b.stderr[-3000:]
    resumed = app("train", f"resume={root / 'B'}", "trainer.epochs=2", cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return root, [np.array(w) for w in base.get_weights()]


def checkpoints(run: Path) -> list[keras.Model]:
    return [keras.saving.load_model(p / "model.keras") for p in sorted((run / "checkpoints").glob("step-*"))]


def backbone(net: keras.Model) -> list[np.ndarray]:
    head = next(layer for layer in net.layers if isinstance(layer, keras.Model))
    return next(layer for layer in head.layers if isinstance(layer, keras.Model)).get_weights()


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_the_frozen_backbone_keeps_the_files_weights_until_it_is_unfrozen(runs):
    root, start = runs
    after_one, after_two = checkpoints(root / "A")
    assert same(backbone(after_one), start)  # BatchNorm's moving statistics too: inference mode
    assert not same(backbone(after_two), start)  # negative control: trained from epoch 2
    log = (root / "A" / "train.log").read_text()
    assert "1,299 trainable" not in log and "epoch 2: the backbone is trained too from now on" in log


def test_a_resume_across_the_unfreeze_point_is_exact(runs):
    root, _ = runs
    a, b = checkpoints(root / "A")[-1], checkpoints(root / "B")[-1]
    assert same(a.get_weights(), b.get_weights())
    assert int(a.optimizer.iterations) == int(b.optimizer.iterations) > 0
    assert "epoch 2: the backbone is trained too" in (root / "B" / "train.log").read_text()
