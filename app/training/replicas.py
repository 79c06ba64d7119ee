"""What a TF strategy's replicas keep apart: Keras's metric variables, BatchNormalization's moving statistics."""

from __future__ import annotations

import keras
import numpy as np

from app.adapters import every_layer
from app.training.steps import build_step_variables


def restore_metrics(net: keras.Model, saved: dict) -> None:
    """Keras's metric variables (built first) as a checkpoint inside an epoch saved them, each replica's own counts."""
    build_step_variables(net)
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
    """A variable's copy on each replica of a TensorFlow strategy; none elsewhere."""
    if keras.backend.backend() != "tensorflow":
        return []
    import tensorflow as tf  # not at the top: the JAX backend runs without it

    value = variable.value
    return list(value.values) if isinstance(value, tf.distribute.DistributedValues) else []


def average_moving_statistics(net: keras.Model) -> None:
    """Every BatchNormalization's moving mean and variance set, on every replica, to their mean over the replicas."""
    for layer in every_layer(net):
        if isinstance(layer, keras.layers.BatchNormalization) and layer.built:
            for variable in (layer.moving_mean, layer.moving_variance):
                copies = _replica_copies(variable)
                if len(copies) > 1:
                    mean = np.mean([np.asarray(copy) for copy in copies], axis=0)
                    for copy in copies:
                        copy.assign(mean.astype(variable.dtype))
