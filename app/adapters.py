"""Keras internals, an adapter each; Keras promises nothing, so pyproject.toml pins the minor test_adapters checks."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

# keras.src.utils.file_utils: keras.applications look `get_file` up there at each download
GET_FILE_MODULE = "keras.src.utils.file_utils"
# The adapter fit, evaluate and predict wrap a PyDataset in; its `shuffle` shuffles the batch indices
PY_DATASET_ADAPTER = "keras.src.trainers.data_adapters.py_dataset_adapter"


class JaxTrainerState:
    """The state compiled JAX steps run on, kept as in Keras's `fit`; results in `_jax_state` for jax_state_sync."""

    def __init__(self, net: Any, names: Sequence[str]):
        self.net, self.names, self.state = net, tuple(names), None
        net._jax_state_synced = True  # the model's variables hold the newest values

    def call(self, step: Callable[[Any], tuple[dict, Any]]) -> dict:
        """`step(state) -> (logs, state)` called on the newest state; its logs."""
        net = self.net
        if net._jax_state_synced:  # read since the last call: take its variables again
            self.state = net._get_jax_state(**dict.fromkeys(self.names, True), purge_model_variables=True)
            net._jax_state_synced = False
        logs, self.state = step(self.state)
        net._jax_state = dict(zip(self.names, self.state, strict=True))
        return logs


@contextlib.contextmanager
def weight_downloads_recorded() -> Iterator[list[tuple[str | None, str | None]]]:
    """Inside, each file keras.applications ask Keras to fetch is recorded as (fname, origin) in the yielded list."""
    # imported here, not at the top: it loads Keras, which must wait for the backend to be chosen
    file_utils = importlib.import_module(GET_FILE_MODULE)
    real, wanted = file_utils.get_file, []

    def get_file(fname=None, origin=None, *args, **kwargs):
        wanted.append((fname, origin))
        return real(fname, origin, *args, **kwargs)

    file_utils.get_file = get_file
    try:
        yield wanted
    finally:
        file_utils.get_file = real


def every_layer(net: Any) -> list:
    """The model's layers at every depth (inside nested models and layers), the model included."""
    return list(net._flatten_layers())


def keras_batch_shuffle_switched_off(dataset: Any, depth: int = 8) -> bool:
    """From on_epoch_begin: the calling Keras adapter serves this epoch unshuffled; True if it would have shuffled."""
    frame = sys._getframe(1)
    for _ in range(depth):
        frame = frame.f_back
        if frame is None:
            return False
        owner = frame.f_locals.get("self")
        if type(owner).__module__ == PY_DATASET_ADAPTER and getattr(owner, "py_dataset", None) is dataset:
            shuffled = bool(owner.shuffle)
            owner.shuffle = False  # `_finite_generator` reads it when the epoch starts
            return shuffled
    return False
