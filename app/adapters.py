"""Every Keras internal the app relies on, each behind one adapter: the JAX trainer's state
(`JaxTrainerState`), the function keras.applications fetch their weights with
(`weight_downloads_recorded`), a model's every nested layer (`every_layer`) and the shuffle
flag of the adapter `fit` wraps a PyDataset in (`keras_batch_shuffle_switched_off`). Keras makes no
promise about these, so pyproject.toml pins Keras to the minor release tests/test_adapters.py
checked them on; that test fails, naming the attribute, when a Keras release changes one.
Imports Keras only inside the one adapter that needs its module, so importing this loads no
framework; never imports the loader, and worker processes never import it.
"""

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
    """The model's state while Keras's compiled JAX functions step, kept as Keras's own `fit` keeps
    it: the variables taken out of the model (`_get_jax_state`, purged from the model) when the
    model holds the newest ones (`_jax_state_synced`), and each call's result left in
    `_jax_state`, which the model's public `jax_state_sync()` writes back when something reads it."""

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
    """Inside, every file keras.applications ask Keras to fetch is recorded as (fname, origin)
    before the fetch, in the list this yields; Keras's own function is put back on the way out."""
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
    """Called from a PyDataset's on_epoch_begin: the Keras adapter that called it (PyDatasetAdapter,
    found among the callers' frames) told to serve this epoch's batches in index order, as it does
    under fit(shuffle=False). True when it would have shuffled them; False otherwise, or where no
    such adapter called (a loop of the user's own)."""
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
