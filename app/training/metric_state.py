"""Keras's metric variables inside an epoch, as a checkpoint keeps them and a resumed run gets
them back: under a TensorFlow strategy each replica's own copy, so the resumed epoch's figures
are those of an unbroken one to the last digit. Never imports the loader."""

from __future__ import annotations

import keras
import numpy as np

from app.training.steps import build_metrics


def restore_metrics(net: keras.Model, saved: dict) -> None:
    """Keras's metric variables as a checkpoint inside an epoch saved them (a loaded model has
    not built them yet); under a strategy each replica's own counts, as they were (their sum
    split evenly would round otherwise, and a resumed run's figures differ in the last digit)."""
    build_metrics(net)
    for variable in net.metrics_variables:
        copies, kept = _replica_copies(variable), saved.get(variable.path + REPLICAS)
        if copies and kept and len(kept) == len(copies):
            for copy, value in zip(copies, kept, strict=True):
                copy.assign(np.asarray(value, variable.dtype))
        else:
            variable.assign(np.asarray(saved[variable.path], variable.dtype))


REPLICAS = "@replicas"  # a metric variable's key + this: its value on each replica


def metric_state(net: keras.Model) -> dict:
    """Keras's metric variables (summed over the replicas), and under a strategy each replica's."""
    state = {}
    for variable in net.metrics_variables:
        state[variable.path] = np.asarray(variable).tolist()
        if copies := _replica_copies(variable):
            state[variable.path + REPLICAS] = [np.asarray(copy).tolist() for copy in copies]
    return state


def _replica_copies(variable) -> list:
    """A metric variable's copy on each replica of a TensorFlow strategy (each replica counts its
    own share; read, they are summed); none elsewhere."""
    if keras.backend.backend() != "tensorflow":
        return []
    import tensorflow as tf  # not at the top: the JAX backend runs without it

    value = variable.value
    return list(value.values) if isinstance(value, tf.distribute.DistributedValues) else []
