"""One bench mode, in the child process the bench command starts for it: the mode's own
pipeline fed through its consumer for `bench.warmup` + `bench.batches` batches, timed by a
clock that starts after the warm-up. The modes are listed in app/commands/bench.py. Runs in
bench's child processes; never imported by the loader or training."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass


def child_main(mode: str, config, conn, log_path: str | None = None) -> None:
    """A mode's process: its result (or error) through `conn`. What it and its workers write to
    stderr (TensorFlow's start-up lines) goes to `log_path`, the bench's log, not the terminal."""
    import logging
    import traceback

    from app.frameworks import native_stderr_to_log

    if log_path:
        logging.getLogger().addHandler(logging.FileHandler(log_path, encoding="utf-8"))
    try:
        with native_stderr_to_log():
            result = _run_mode(mode, config)
    except BaseException as error:  # noqa: BLE001 - reported as that mode's result
        result = {"error": reason(error), "traceback": traceback.format_exc()}
    try:
        conn.send(result)
    except OSError:  # the bench stopped (Ctrl-C, SIGTERM) and closed its end: nobody waits for this result
        pass
    conn.close()


# Lines of a TensorFlow error that say where, not what: its "Graph execution error:" names the
# node and its stack first, and the op's own message (or the Python error a generator raised,
# with its traceback) after them.
WHERE = ("Graph execution error:", "Detected at node", "<stack traces unavailable>", "Node: ",
         "Traceback (most recent call last):", "[[")
PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): ")


def reason(error: BaseException) -> str:
    """`error` in one line: its type and the first line of its message that says what went wrong
    (the Python error inside a TensorFlow error, when that is what it carries)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    said = next((line.strip() for line in lines if not line[0].isspace() and not line.startswith(WHERE)),
                lines[0].strip() if lines else "")
    return said if PYTHON_ERROR.match(said) else f"{type(error).__name__}: {said}"


class _Clock:
    """Times batches: the first from the start, the rate over those after the warmup."""

    def __init__(self, warmup: int, batch: int):
        self.warmup, self.batch = warmup, batch
        self.start = time.perf_counter()
        self.marks: list[float] = []

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def result(self) -> dict:
        count = len(self.marks) - self.warmup
        since = self.marks[self.warmup - 1] if self.warmup else self.start
        seconds = self.marks[-1] - since
        return {"images_per_s": count * self.batch / seconds, "first_batch_s": self.marks[0] - self.start,
                "timed_batches": count, "timed_seconds": seconds}


def _run_mode(mode: str, config) -> dict:
    from app.augment import Augmenter
    from app.data import load_source

    data, bench = config.data, config.bench
    source = load_source(data)
    augmenter = Augmenter(config.augment.transforms, data.image_size, draft=data.decode.draft,
                          max_pixels=data.max_image_pixels)
    batch, total = data.batch_size, bench.warmup + bench.batches
    order = _order(len(source.train), batch, batch * total, config.seed, config.queue.shuffle)
    clock = _Clock(bench.warmup, batch)
    runner = {"baseline": _baseline, "loader_steps": _loader_steps, "loader_fit": _loader_fit, "loader": _loader,
              "keras_threads": _keras, "keras_processes": _keras, "tf_data": _tf_data, "serial": _serial}[mode]
    runner(_Run(mode, config, source, augmenter, order, clock))
    return clock.result()


@dataclass
class _Run:
    """What a mode is given: its name, the config, the data, the training augmentation, the
    (epoch, sample index) pairs to go through, and the clock to tick a batch."""

    mode: str
    config: object  # the loaded config (app/config.py)
    source: object
    augmenter: object
    order: object
    clock: _Clock


def _order(n: int, batch: int, needed: int, seed: int, shuffle: bool):
    """(epoch, sample index) pairs, epoch after epoch until `needed`, full batches only (as
    training takes them), so every timed batch holds `batch` images."""
    import numpy as np

    from app.loader.order import epoch_order, full_batches

    pairs, epoch = [], 0
    while len(pairs) < needed:
        order = full_batches(epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle), batch)
        pairs += [(epoch, int(i)) for i in order]
        epoch += 1
    return np.array(pairs[:needed])


def _enqueuer(config, source):
    from app.loader.pipeline import build_loader

    return build_loader(config, {"train": (source.train, config.augment.transforms)})


def _loader_batches(enqueuer, order):
    """This loader's batches over `order`, one epoch's pass after another."""
    epochs = order[:, 0]
    for epoch in sorted(set(epochs.tolist())):
        indices = order[epochs == epoch, 1]
        yield from enqueuer.batches("train", indices, int(epoch))


def _trivial_model(config, num_classes, normalising=True):
    """The same trivial backbone for every mode; this loader's modes put `train`'s
    normalising first layer in front (its batches are uint8), Keras's get float32."""
    import keras

    from app.model import classifier

    size = config.data.image_size
    net = keras.Sequential([keras.Input((*size, 3)), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(num_classes, activation="softmax")])
    if normalising:
        net = classifier(net, size)
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                steps_per_execution=config.trainer.steps_per_execution)
    return net


def _timing_callback(clock):
    import keras

    class Tick(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            clock.tick()

    return Tick()


def _baseline(run: _Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    import numpy as np
    import tensorflow as tf

    data = config.data
    net = _trivial_model(config, len(source.class_names))
    x = np.zeros((data.batch_size, *data.image_size, 3), np.uint8)
    y = np.zeros((data.batch_size,), np.int64)
    clock.start = time.perf_counter()
    net.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), steps_per_epoch=len(order) // data.batch_size,
            epochs=1, verbose=0, callbacks=[_timing_callback(clock)])


def _loader_steps(run: _Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    import keras

    from app.training.steps import EpochFigures, EpochPlan, Feed, train_epoch

    net = _trivial_model(config, len(source.class_names))
    steps = len(order) // config.data.batch_size
    clock.start = time.perf_counter()
    with _enqueuer(config, source) as enqueuer:
        train_epoch(net, Feed(_loader_batches(enqueuer, order), steps),
                    keras.callbacks.CallbackList([_timing_callback(clock)], model=net), EpochFigures(),
                    EpochPlan(steps, config.data.batch_size, log_every=config.trainer.log_every_steps))


def _loader_fit(run: _Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    import tensorflow as tf

    data = config.data
    net = _trivial_model(config, len(source.class_names))
    signature = (tf.TensorSpec((None, *data.image_size, 3), tf.uint8), tf.TensorSpec((None,), tf.int64))
    clock.start = time.perf_counter()
    with _enqueuer(config, source) as enqueuer:
        dataset = tf.data.Dataset.from_generator(
            lambda: _loader_batches(enqueuer, order), output_signature=signature)
        net.fit(dataset, steps_per_epoch=len(order) // data.batch_size, epochs=1, verbose=0,
                callbacks=[_timing_callback(clock)])


def _loader(run: _Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    clock.start = time.perf_counter()
    with _enqueuer(config, source) as enqueuer:
        for _ in _loader_batches(enqueuer, order):
            clock.tick()


def _serial(run: _Run):
    config, source, augmenter, order, clock = run.config, run.source, run.augmenter, run.order, run.clock
    from app.loader.worker import make_sample, prepare_process

    prepare_process()  # single-threaded and keeping freed memory, as a worker is: the per-core rate

    batch = config.data.batch_size
    clock.start = time.perf_counter()
    for k, (epoch, index) in enumerate(order, start=1):
        make_sample(source.train, augmenter, int(index), config.seed, int(epoch))
        if k % batch == 0:
            clock.tick()


def _keras(run: _Run):
    mode, config, source, augmenter = run.mode, run.config, run.source, run.augmenter
    order, clock = run.order, run.clock
    from app.bench.keras_baseline import KerasBaseline

    data, queue = config.data, config.queue
    net = _trivial_model(config, len(source.class_names), normalising=False)
    clock.start = time.perf_counter()
    steps = len(order) // data.batch_size
    batches = order[:steps * data.batch_size].reshape(steps, data.batch_size, 2)
    dataset = KerasBaseline(source.train, augmenter, batches, config.seed,
                            workers=max(queue.workers, 1), use_multiprocessing=mode == "keras_processes",
                            max_queue_size=queue.max_size)
    net.fit(dataset, epochs=1, verbose=0, callbacks=[_timing_callback(clock)])


def _tf_data(run: _Run):
    config, source, order, clock = run.config, run.source, run.order, run.clock
    from app.bench.tf_data import dataset

    batch = config.data.batch_size
    net = _trivial_model(config, len(source.class_names), normalising=False)
    steps = len(order) // batch
    pipeline = dataset(source.train, run.augmenter, order, config.seed, batch)  # reads the headers
    clock.start = time.perf_counter()
    net.fit(pipeline, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[_timing_callback(clock)])
