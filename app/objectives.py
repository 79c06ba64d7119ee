"""Keras objects the recipe needs and Keras lacks, registered so checkpoints load; model.keras is uncompiled."""

from __future__ import annotations

import keras
from keras import ops

from app.measures import EPSILON


@keras.saving.register_keras_serializable(package="app")
class SmoothedSparseCrossentropy(keras.losses.Loss):
    """Sparse crossentropy smoothed by ε, as Keras scores one-hot labels: (1 − ε)·−log p(y) + ε·mean_c(−log p_c)."""

    def __init__(self, smoothing: float = 0.0, name: str = "smoothed_sparse_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.smoothing = smoothing

    def call(self, y_true, y_pred):
        log_p = ops.log(ops.clip(y_pred, EPSILON, 1.0 - EPSILON))
        labels = ops.expand_dims(ops.cast(ops.reshape(y_true, (-1,)), "int32"), -1)
        picked = ops.squeeze(ops.take_along_axis(log_p, labels, axis=-1), -1)
        return -(1.0 - self.smoothing) * picked - self.smoothing * ops.mean(log_p, axis=-1)

    def get_config(self):
        return {**super().get_config(), "smoothing": self.smoothing}


@keras.saving.register_keras_serializable(package="app")
class WeightedBinaryCrossentropy(keras.losses.Loss):
    """BCE, labels smoothed to 0.5 as Keras does, `pos_weight` w: −mean_c(w_c·y_c·log p_c + (1 − y_c)·log(1 − p_c))."""

    def __init__(self, pos_weight=None, smoothing: float = 0.0, name: str = "weighted_binary_crossentropy",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.pos_weight = None if pos_weight is None else [float(w) for w in pos_weight]
        self.smoothing = smoothing

    def call(self, y_true, y_pred):
        p = ops.clip(y_pred, EPSILON, 1.0 - EPSILON)
        y = ops.cast(y_true, p.dtype) * (1.0 - self.smoothing) + 0.5 * self.smoothing
        weight = 1.0 if self.pos_weight is None else ops.convert_to_tensor(self.pos_weight, p.dtype)
        return -ops.mean(weight * y * ops.log(p) + (1.0 - y) * ops.log(1.0 - p), axis=-1)

    def get_config(self):
        return {**super().get_config(), "pos_weight": self.pos_weight, "smoothing": self.smoothing}


class _BinnedScores(keras.metrics.Metric):
    """Each class's positives and negatives counted in `bins` equal score bins on the device, as Keras's AUC does."""

    def __init__(self, num_labels: int, bins: int = 1000, **kwargs):
        super().__init__(**kwargs)
        self.num_labels, self.bins = int(num_labels), int(bins)
        shape = (self.num_labels * self.bins,)
        self.positives, self.negatives = (self.add_variable(shape=shape, initializer="zeros", name=n)
                                          for n in ("positives", "negatives"))

    def update_state(self, y_true, y_pred, sample_weight=None):
        truth = ops.cast(y_true, "float32")
        weight = ops.ones_like(truth) if sample_weight is None else ops.broadcast_to(  # 0: a padding row
            ops.expand_dims(ops.cast(ops.reshape(sample_weight, (-1,)), "float32"), -1), ops.shape(truth))
        bin_of = ops.clip(ops.cast(ops.floor(ops.cast(y_pred, "float32") * self.bins), "int32"), 0, self.bins - 1)
        cell = ops.reshape(bin_of + ops.arange(self.num_labels, dtype="int32") * self.bins, (-1,))
        size = self.num_labels * self.bins
        self.positives.assign_add(ops.segment_sum(ops.reshape(truth * weight, (-1,)), cell, size))
        self.negatives.assign_add(ops.segment_sum(ops.reshape((1.0 - truth) * weight, (-1,)), cell, size))

    def counts(self) -> tuple:
        """(positives, negatives), a row a class, a column a bin, the highest scores first."""
        shape = (self.num_labels, self.bins)
        return (ops.flip(ops.reshape(self.positives, shape), axis=1),
                ops.flip(ops.reshape(self.negatives, shape), axis=1))

    def reset_state(self):
        for variable in (self.positives, self.negatives):
            variable.assign(ops.zeros(variable.shape, variable.dtype))

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "bins": self.bins}


def _mean_of_defined(values, defined):
    """The mean of `values` where `defined` (0 with none defined, as a pass with no such class scores)."""
    defined = ops.cast(defined, "float32")
    return ops.divide_no_nan(ops.sum(values * defined), ops.sum(defined))


@keras.saving.register_keras_serializable(package="app")
class MeanAveragePrecision(_BinnedScores):
    """`mean_average_precision` of a pass from counts binned on the device (as Keras's AUC): exact but within a bin."""

    def __init__(self, num_labels: int, bins: int = 1000, name: str = "map", **kwargs):
        super().__init__(num_labels, bins, name=name, **kwargs)

    def result(self):
        positives, negatives = self.counts()
        tp, fp = ops.cumsum(positives, axis=1), ops.cumsum(negatives, axis=1)
        total = tp[:, -1:]
        recall_gained = ops.divide_no_nan(positives, total)
        average_precision = ops.sum(recall_gained * ops.divide_no_nan(tp, tp + fp), axis=1)
        return _mean_of_defined(average_precision, total[:, 0] > 0)  # no positive: no average precision


@keras.saving.register_keras_serializable(package="app")
class MacroAUC(_BinnedScores):
    """Mean ROC AUC over classes with a positive and a negative in the pass, as `evaluate` (Keras: all); ties half."""

    def __init__(self, num_labels: int, bins: int = 1000, name: str = "auc", **kwargs):
        super().__init__(num_labels, bins, name=name, **kwargs)

    def result(self):
        positives, negatives = self.counts()
        above = ops.cumsum(positives, axis=1) - positives  # positives in higher bins than each
        pairs_won = ops.sum(negatives * (above + 0.5 * positives), axis=1)
        p, n = ops.sum(positives, axis=1), ops.sum(negatives, axis=1)
        return _mean_of_defined(ops.divide_no_nan(pairs_won, p * n), ops.logical_and(p > 0, n > 0))


@keras.saving.register_keras_serializable(package="app")
class PerClassF1(keras.metrics.Metric):
    """Several labels an image: `f1_<class name>` at `threshold`, `macro_precision`, `macro_recall` (Keras's: micro)."""

    def __init__(self, class_names, threshold: float = 0.5, name: str = "per_class_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.class_names, self.threshold = [str(c) for c in class_names], float(threshold)
        shape = (len(self.class_names),)
        self.tp, self.fp, self.fn = (self.add_variable(shape=shape, initializer="zeros", name=n)
                                     for n in ("tp", "fp", "fn"))

    def update_state(self, y_true, y_pred, sample_weight=None):
        truth = ops.cast(y_true, "float32")
        guess = ops.cast(y_pred >= self.threshold, "float32")
        if sample_weight is not None:  # weight 0: a padding row counts nowhere
            weight = ops.expand_dims(ops.cast(ops.reshape(sample_weight, (-1,)), "float32"), -1)
            truth, guess = truth * weight, guess * weight
        self.tp.assign_add(ops.sum(truth * guess, axis=0))
        self.fp.assign_add(ops.sum((1.0 - truth) * guess, axis=0))
        self.fn.assign_add(ops.sum(truth * (1.0 - guess), axis=0))

    def result(self):
        precision = ops.divide_no_nan(self.tp, self.tp + self.fp)
        recall = ops.divide_no_nan(self.tp, self.tp + self.fn)
        f1 = ops.divide_no_nan(2.0 * self.tp, 2.0 * self.tp + self.fp + self.fn)
        return {**{f"f1_{name}": f1[i] for i, name in enumerate(self.class_names)},
                "macro_precision": ops.mean(precision), "macro_recall": ops.mean(recall)}

    def reset_state(self):
        for variable in (self.tp, self.fp, self.fn):
            variable.assign(ops.zeros(variable.shape, variable.dtype))

    def get_config(self):
        return {**super().get_config(), "class_names": self.class_names, "threshold": self.threshold}


@keras.saving.register_keras_serializable(package="app")
class PerClassRecall(keras.metrics.Metric):
    """Of each class's samples, the share predicted as that class (argmax): one value a class, `recall_<class name>`."""

    def __init__(self, class_names, name: str = "per_class_recall", **kwargs):
        super().__init__(name=name, **kwargs)
        self.class_names = [str(c) for c in class_names]
        shape = (len(self.class_names),)
        self.hits = self.add_variable(shape=shape, initializer="zeros", name="hits")
        self.seen = self.add_variable(shape=shape, initializer="zeros", name="seen")

    def update_state(self, y_true, y_pred, sample_weight=None):
        classes = len(self.class_names)
        truth = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), classes)
        if sample_weight is not None:  # weight 0: a padding row (app/training/shares.py) counts nowhere
            truth = truth * ops.expand_dims(ops.cast(ops.reshape(sample_weight, (-1,)), truth.dtype), -1)
        guess = ops.one_hot(ops.argmax(y_pred, axis=-1), classes)
        self.seen.assign_add(ops.sum(truth, axis=0))
        self.hits.assign_add(ops.sum(truth * guess, axis=0))

    def result(self):
        recall = ops.divide_no_nan(self.hits, self.seen)
        return {f"recall_{name}": recall[i] for i, name in enumerate(self.class_names)}

    def reset_state(self):
        self.hits.assign(ops.zeros(self.hits.shape, self.hits.dtype))
        self.seen.assign(ops.zeros(self.seen.shape, self.seen.dtype))

    def get_config(self):
        return {**super().get_config(), "class_names": self.class_names}
