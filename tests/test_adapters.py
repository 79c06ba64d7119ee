"""The Keras internals behind app/adapters.py, each checked as the app uses it: a Keras release
that renames or changes one fails here, naming it, before a run fails somewhere deep. The
installed Keras must be inside pyproject.toml's pin (the release these checks passed on)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import keras
import numpy as np
import pytest
from keras.src.trainers.data_adapters import get_data_adapter  # the adapter fit builds, by its own rule
from packaging.specifiers import SpecifierSet

from app.adapters import (
    GET_FILE_MODULE,
    PY_DATASET_ADAPTER,
    every_layer,
    keras_batch_shuffle_switched_off,
    weight_downloads_recorded,
)

ROOT = Path(__file__).resolve().parent.parent

# One SGD step at a time on a zero-initialised Dense(1) over inputs of ones towards 1 (mse,
# learning rate 0.1): each weight moves by 0.2 × (1 − prediction). Three calls, Keras's JAX
# state written back into the model after the second: 0.2, 0.28, then 0.312 from the written-back
# weights; without the adapter's bookkeeping the model would read 0 or step from stale weights.
JAX_STEPS = """
import json, os
os.environ["KERAS_BACKEND"] = "jax"
import keras, numpy as np
from app.adapters import JaxTrainerState
net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, kernel_initializer="zeros")])
net.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
net.optimizer.build(net.trainable_variables)
net.make_train_function()
names = ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables")
state = JaxTrainerState(net, names)
batch = (np.ones((4, 2), np.float32), np.ones((4, 1), np.float32))
step = lambda s: net.train_function(s, iter([batch]))
seen = []
for i in range(3):
    state.call(step)
    if i == 1:
        net.jax_state_sync()
        seen.append(float(net.get_weights()[0][0, 0]))
net.jax_state_sync()
seen.append(float(net.get_weights()[0][0, 0]))
print(json.dumps(seen))
"""


def test_keras_is_inside_the_pinned_range():
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(p for p in pins if re.match(r"keras\b", p))
    specifier = SpecifierSet(pin.removeprefix("keras"))
    assert "<" in str(specifier), f"{pin}: Keras's internals (app/adapters.py) need an upper bound"
    assert version("keras") in specifier, f"Keras {version('keras')} is outside the pin {pin}"
    assert "3.99" not in specifier  # negative control: the pin does refuse a later release


def test_jax_trainer_state_steps_and_writes_back_as_fit_does():
    done = subprocess.run([sys.executable, "-c", JAX_STEPS], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == pytest.approx([0.28, 0.312], abs=1e-6)


def test_keras_applications_fetch_weights_through_the_recorded_function(monkeypatch, tmp_path):
    file_utils = importlib.import_module(GET_FILE_MODULE)

    def offline(fname=None, origin=None, *args, **kwargs):
        raise OSError(f"no network for {origin}")

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(file_utils, "get_file", offline)
    with pytest.raises(OSError), weight_downloads_recorded() as wanted:
        keras.applications.MobileNetV3Small(include_top=False, weights="imagenet", input_shape=(32, 32, 3),
                                            minimalistic=True)
    assert len(wanted) == 1, f"keras.applications no longer fetch through {GET_FILE_MODULE}.get_file"
    fname, origin = wanted[0]
    assert fname.endswith(".h5") and origin.startswith("https://") and fname in origin
    assert file_utils.get_file is offline  # Keras's own function is back


class _Holder(keras.layers.Layer):
    """A layer that keeps another as an attribute: Keras tracks it, `layers` does not show it."""

    def __init__(self):
        super().__init__()
        self.norm = keras.layers.BatchNormalization()

    def call(self, x):
        return self.norm(x)


def test_every_layer_reaches_layers_inside_models_and_layers():
    inner = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization()])
    net = keras.Sequential([keras.Input((4,)), inner, _Holder()])
    norms = [layer for layer in every_layer(net) if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(norms) == 2 and net in every_layer(net)
    # negative control: the public `layers` lists the top level only, neither normalisation
    assert not [layer for layer in net.layers if isinstance(layer, keras.layers.BatchNormalization)]


class _Batches(keras.utils.PyDataset):
    def __init__(self, switch: bool):
        super().__init__()
        self.switch, self.switched = switch, None

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index):
        return np.full((1, 2), index), np.zeros(1)

    def on_epoch_begin(self):
        if self.switch:
            self.switched = keras_batch_shuffle_switched_off(self)


def test_the_pydataset_adapter_fit_uses_is_told_not_to_shuffle_from_on_epoch_begin():
    adapters_seen = []
    for switch in (True, False):  # the second: nothing switches it off, the negative control
        dataset = _Batches(switch)
        adapter = get_data_adapter(dataset, shuffle=True)
        adapter.on_epoch_begin()
        adapters_seen.append((type(adapter).__module__ == PY_DATASET_ADAPTER, dataset.switched, adapter.shuffle))
    assert adapters_seen == [(True, True, False), (True, None, True)]
    assert keras_batch_shuffle_switched_off(_Batches(False)) is False  # called from no adapter
