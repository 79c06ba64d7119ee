"""The bench modes that train through Keras on TensorFlow: `baseline` (the trivial model on one
in-memory batch), `loader_steps` (this loader through `train`'s step loop), `loader_fit` (this
loader through `model.fit`), `keras_threads` and `keras_processes` (keras.utils.PyDataset,
app/bench/keras_baseline.py) and `tf_data` (app/bench/tf_data.py). Imported by app/bench/modes.py
only when one of them runs, so the other modes' processes never load TensorFlow. Never imported
by the loader or training."""

from __future__ import annotations

import time

import keras
import numpy as np
import tensorflow as tf

from app.bench.keras_baseline import KerasBaseline
from app.bench.loading import Run, loader_batches, reason, training_loader
from app.bench.tf_data import dataset
from app.errors import BadSampleError, DataError
from app.model import classifier
from app.training.steps import EpochFigures, EpochPlan, Feed, train_epoch


def _trivial_model(config, num_classes, normalising=True):
    """The same trivial backbone for every mode; this loader's modes put `train`'s
    normalising first layer in front (its batches are uint8), Keras's get float32."""
    size = config.data.image_size
    net = keras.Sequential([keras.Input((*size, 3)), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(num_classes, activation="softmax")])
    if normalising:
        net = classifier(net, size)
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                steps_per_execution=config.trainer.steps_per_execution)
    return net


class _Tick(keras.callbacks.Callback):
    """The clock ticked at each training batch's end."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def on_train_batch_end(self, batch, logs=None):
        self.clock.tick()


def _baseline(run: Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    data = config.data
    net = _trivial_model(config, len(source.class_names))
    x = np.zeros((data.batch_size, *data.image_size, 3), np.uint8)
    y = np.zeros((data.batch_size,), np.int64)
    clock.start = time.perf_counter()
    net.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), steps_per_epoch=len(order) // data.batch_size,
            epochs=1, verbose=0, callbacks=[_Tick(clock)])


def _loader_steps(run: Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    net = _trivial_model(config, len(source.class_names))
    steps = len(order) // config.data.batch_size
    clock.start = time.perf_counter()
    with training_loader(config, source) as loader:
        train_epoch(net, Feed(loader_batches(loader, order), steps),
                    keras.callbacks.CallbackList([_Tick(clock)], model=net), figures=EpochFigures(),
                    plan=EpochPlan(steps=steps, batch_size=config.data.batch_size,
                                   log_every=config.trainer.log_every_steps))


def _loader_fit(run: Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    data = config.data
    net = _trivial_model(config, len(source.class_names))
    signature = (tf.TensorSpec((None, *data.image_size, 3), tf.uint8), tf.TensorSpec((None,), tf.int64))
    clock.start = time.perf_counter()
    with training_loader(config, source) as loader:
        batches = tf.data.Dataset.from_generator(lambda: loader_batches(loader, order), output_signature=signature)
        net.fit(batches, steps_per_epoch=len(order) // data.batch_size, epochs=1, verbose=0,
                callbacks=[_Tick(clock)])


def _keras(run: Run):
    mode, config, source, augmenter = run.mode, run.config, run.source, run.augmenter
    order, clock = run.order, run.clock
    data, queue = config.data, config.queue
    net = _trivial_model(config, len(source.class_names), normalising=False)
    clock.start = time.perf_counter()
    steps = len(order) // data.batch_size
    batches = order[:steps * data.batch_size].reshape(steps, data.batch_size, 2)
    pydataset = KerasBaseline(source.train, augmenter, batches, config.seed,
                              workers=max(queue.workers, 1), use_multiprocessing=mode == "keras_processes",
                              max_queue_size=queue.max_size)
    net.fit(pydataset, epochs=1, verbose=0, callbacks=[_Tick(clock)])


def _tf_data(run: Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    batch = config.data.batch_size
    net = _trivial_model(config, len(source.class_names), normalising=False)
    steps = len(order) // batch
    pipeline = dataset(source.train, run.augmenter, order, seed=config.seed, batch_size=batch)  # reads the headers
    clock.start = time.perf_counter()
    try:
        net.fit(pipeline, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[_Tick(clock)])
    except tf.errors.InvalidArgumentError as error:  # TensorFlow's decoders name no file: find it
        where = _first_unreadable(source.train, order)
        if where is None:
            raise
        raise DataError(f"{reason(error)}; a file of this mode's samples that the loader cannot read either: "
                        f"{where}") from error


def _first_unreadable(split, order) -> str | None:
    """'path: reason' of the first sample of `order` this app's own reader refuses; None if none."""
    for index in dict.fromkeys(order[:, 1].tolist()):
        try:
            split.read(index)
        except BadSampleError as bad:
            return f"{bad.where}: {bad.reason}"
    return None


KERAS_MODES = {"baseline": _baseline, "loader_steps": _loader_steps, "loader_fit": _loader_fit,
               "keras_threads": _keras, "keras_processes": _keras, "tf_data": _tf_data}
