"""Bench modes that train through Keras; only `tf_data` imports TensorFlow, so on JAX the others run without it."""

from __future__ import annotations

import time

import keras
import numpy as np

from app.bench.keras_baseline import HandRegions, KerasBaseline
from app.bench.loading import Run, loader_batches, reason, training_loader
from app.bench.slide_modes import SLIDE_MODES
from app.data.slides.patches import PatchSplit
from app.errors import BadSampleError, DataError
from app.frameworks import load_tensorflow
from app.model import classifier
from app.tasks import task_of
from app.training.steps import EpochFigures, EpochPlan, Feed, build_step_variables, train_epoch


def _image_head(classes: int, activation: str) -> list:
    return [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes, activation=activation)]


def _pixel_head(classes: int, activation: str) -> list:
    """A 1×1 convolution: a prediction a pixel at the input's size, as a segmentation model's (app/model.py)."""
    return [keras.layers.Conv2D(classes, 1, activation=activation)]


HEADS = {"image": _image_head, "pixels": _pixel_head}  # by the task's `output`: one prediction an image, or a pixel


def _trivial_model(config, source, normalising=True):
    """Every mode's trivial backbone (after `train`'s normaliser for uint8), its head and loss the run's task's."""
    size, task, names = config.data.image_size, task_of(config.data.task), source.class_names
    net = keras.Sequential([keras.Input((*size, 3)), *HEADS[task.output](len(names), task.activation)])
    if normalising:
        net = classifier(net, size)
    loss, _ = task.objectives(config.trainer, names, ignore_index=config.data.ignore_index)
    net.compile(optimizer="sgd", loss=loss, metrics=["accuracy"],
                steps_per_execution=config.trainer.steps_per_execution)
    return net


def _blank_targets(split, image_size, rows: int) -> np.ndarray:
    """`rows` targets of 0s shaped and typed as the split's: a mask of its mask_dtype where a sample is an (image,
    mask) pair, else a label (a class index, or a 0/1 row)."""
    if split.mask_dtype is not None:
        return np.zeros((rows, *image_size), split.mask_dtype)
    labels = np.asarray(split.labels)
    return np.zeros((rows, *labels.shape[1:]), labels.dtype)


class _Tick(keras.callbacks.Callback):
    """The clock ticked at each training batch's end."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def on_train_batch_end(self, batch, logs=None):
        self.clock.tick()


def _on_tensorflow() -> bool:
    return keras.backend.backend() == "tensorflow"


def _baseline(run: Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    data = config.data
    net = _trivial_model(config, source)
    x = np.zeros((data.batch_size, *data.image_size, 3), np.uint8)
    y = _blank_targets(source.train, data.image_size, data.batch_size)
    clock.start = time.perf_counter()
    net.fit(_one_batch_repeated(x, y), steps_per_epoch=len(order) // data.batch_size,
            epochs=1, verbose=0, callbacks=[_Tick(clock)])


def _one_batch_repeated(x: np.ndarray, y: np.ndarray):
    """(x, y) again and again, as `fit` takes it: a tf.data dataset on TensorFlow, a generator on JAX."""
    if _on_tensorflow():
        import tensorflow as tf  # the TensorFlow backend only: JAX runs this mode without it

        return tf.data.Dataset.from_tensors((x, y)).repeat()
    return _repeated((x, y))


def _repeated(batch: tuple):
    while True:
        yield batch


def _loader_steps(run: Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    net = _trivial_model(config, source)
    build_step_variables(net)  # before the train function exists (JAX fixes its state's shape then), as train does
    steps = len(order) // config.data.batch_size
    clock.start = time.perf_counter()
    with training_loader(run) as loader:
        train_epoch(net, Feed(loader_batches(loader, order), steps),
                    keras.callbacks.CallbackList([_Tick(clock)], model=net), figures=EpochFigures(),
                    plan=EpochPlan(steps=steps, batch_size=config.data.batch_size,
                                   log_every=config.trainer.log_every_steps))


def _loader_fit(run: Run):
    """On TensorFlow through tf.data.Dataset.from_generator (no prefetch); on JAX the loader's generator as it is."""
    config, source, order, clock = run.config, run.source, run.order, run.clock
    data = config.data
    net = _trivial_model(config, source)
    clock.start = time.perf_counter()
    with training_loader(run) as loader:
        if _on_tensorflow():
            import tensorflow as tf  # the TensorFlow backend only: JAX runs this mode without it

            labels = _blank_targets(source.train, data.image_size, 0)
            signature = (tf.TensorSpec((None, *data.image_size, 3), tf.uint8),
                         tf.TensorSpec((None, *labels.shape[1:]), tf.as_dtype(labels.dtype)))
            batches = tf.data.Dataset.from_generator(lambda: loader_batches(loader, order),
                                                     output_signature=signature)
        else:
            batches = loader_batches(loader, order)
        net.fit(batches, steps_per_epoch=len(order) // data.batch_size, epochs=1, verbose=0,
                callbacks=[_Tick(clock)])


def _keras(run: Run):
    mode, config, source, augmenter = run.mode, run.config, run.source, run.augmenter
    order, clock = run.order, run.clock
    data = config.data
    net = _trivial_model(config, source, normalising=False)
    clock.start = time.perf_counter()
    steps = len(order) // data.batch_size
    batches = order[:steps * data.batch_size].reshape(steps, data.batch_size, 2)
    queue = run.queue  # the loader's modes' own
    pydataset = KerasBaseline(source.train, augmenter, batches, config.seed,
                              workers=max(queue.workers, 1), use_multiprocessing=mode == "keras_processes",
                              max_queue_size=queue.max_size)
    net.fit(pydataset, epochs=1, verbose=0, callbacks=[_Tick(clock)])


def _keras_regions(run: Run):
    """The loader's patches read by the reader a pathology user writes, in a PyDataset with workers."""
    config, source, order, clock = run.config, run.source, run.order, run.clock
    split, batch = source.train, config.data.batch_size
    if not isinstance(split, PatchSplit):
        raise DataError("keras_regions benches patches of slides: set data.patches.size (docs/slides.md), or leave it "
                        "out of bench.modes")
    net = _trivial_model(config, source, normalising=False)
    steps = len(order) // batch
    batches = order[:steps * batch].reshape(steps, batch, 2)
    places = {}
    for epoch, index in {(int(e), int(k)) for e, k in order[:steps * batch]}:
        layout, (y, x) = split.region_of(index, (config.seed, epoch, 0))
        places[epoch, index] = (layout.slide.path, layout.level, (x, y), layout.read, layout.slide.openslide)
    pydataset = HandRegions(split, run.augmenter, (batches, places), config.seed, workers=max(run.queue.workers, 1),
                            use_multiprocessing=True, max_queue_size=run.queue.max_size)
    clock.start = time.perf_counter()
    net.fit(pydataset, epochs=1, verbose=0, callbacks=[_Tick(clock)])


def _tf_data(run: Run):
    """TensorFlow, loaded here only (kept off the GPUs on JAX), so the other modes run where it is not installed."""
    tf = load_tensorflow()
    from app.bench.tf_data import dataset  # imports TensorFlow at its top

    config, source, order, clock = run.config, run.source, run.order, run.clock
    batch = config.data.batch_size
    net = _trivial_model(config, source, normalising=False)
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
               "keras_threads": _keras, "keras_processes": _keras, "keras_regions": _keras_regions, "tf_data": _tf_data,
               **SLIDE_MODES}
