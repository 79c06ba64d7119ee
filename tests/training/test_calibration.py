"""The training side of capacity's probes (app/training/calibration.py): the step timing for
`auto` on a real compiled model, which it must leave exactly as it found it."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from app.model import classifier
from app.training.calibration import kept, time_step


@pytest.fixture(scope="module")
def net():
    keras.utils.set_random_seed(0)
    backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.Dropout(0.5),
                                 keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax")])
    model = classifier(backbone, (8, 8))
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def values(model) -> list[np.ndarray]:
    return [v.numpy().copy() for v in [*model.variables, *model.optimizer.variables, *model.metrics_variables]]


def test_the_step_probe_leaves_the_model_as_it_found_it(net):
    batch = (np.random.default_rng(1).integers(0, 255, (4, 8, 8, 3), np.uint8), np.array([0, 1, 2, 0]))
    times, cpu = time_step(net, batch)
    before = values(net)
    seeds = [v for v in net.variables if "seed" in v.path]
    assert seeds, "Dropout's seed state is one of the variables put back"
    assert len(times) == len(cpu) == 3 and all(t > 0 for t in times) and all(c > 0 for c in cpu)
    assert all(np.array_equal(a, b) for a, b in zip(before, values(net), strict=True))
    time_step(net, batch)
    assert all(np.array_equal(a, b) for a, b in zip(before, values(net), strict=True))
    # negative control: inside `kept` the same steps do change the weights, the optimizer and the seed
    with kept(net):
        net.train_on_batch(*batch)
        changed = [not np.array_equal(a, b) for a, b in zip(before, values(net), strict=True)]
        assert sum(changed) > len(seeds) + 2
    assert all(np.array_equal(a, b) for a, b in zip(before, values(net), strict=True))
