"""A bench mode in its child process: `bench.warmup` batches through its consumer, then `bench.batches` timed."""

from __future__ import annotations

import gc
import logging
import traceback

from app.augment import augmenters
from app.bench.loading import Clock, Run, TileClock, loader_only, reason, serial, visit_order
from app.data.pixels.pixels import run_pixels
from app.data.sources.chosen import load_or_generate_source
from app.frameworks import native_stderr_to_log
from app.io import OwnFileHandler
from app.loader.pipeline import Queue
from app.schema import SLIDE_BENCH_MODES

# The modes that run without Keras: their process never loads TensorFlow, so its memory and
# start-up are the loader's own.
PLAIN_MODES = {"loader": loader_only, "serial": serial}


def child_main(mode: str, config, queue: Queue, conn, log_path: str | None = None) -> None:
    """A mode's process: its result (or error) through `conn`; stderr (TensorFlow's lines) goes to `log_path`."""
    if log_path:
        logging.getLogger().addHandler(OwnFileHandler(log_path, encoding="utf-8"))
    try:
        with native_stderr_to_log():
            result = _run_mode(mode, config, queue)
    except BaseException as error:  # noqa: BLE001 - reported as that mode's result
        result = {"error": reason(error), "traceback": traceback.format_exc()}
    # A tf.data error's traceback holds its iterator in a reference cycle; freed at exit, its
    # numpy_function threads wait for a GIL that finalization never gives back (a minute's hang
    # until bench kills the process). Freed here, while they can still run.
    gc.collect()
    try:
        conn.send(result)
    except OSError:  # the bench stopped (Ctrl-C, SIGTERM) and closed its end: nobody waits for this result
        pass
    conn.close()


# Lines of a TensorFlow error that say where, not what: its "Graph execution error:" names the
# node and its stack first, and the op's own message (or the Python error a generator raised,
# with its traceback) after them.


def _run_mode(mode: str, config, queue: Queue) -> dict:
    data, bench = config.data, config.bench
    source = load_or_generate_source(data)
    # as the loader builds the training split's: of (image, mask) pairs where its samples are (its mask_dtype)
    augmenter = augmenters(data, {"train": config.augment.transforms}, pixels=run_pixels(data, source.train),
                           masks=source.train.mask_dtype is not None)["train"]
    batch, total = data.batch_size, bench.warmup + bench.batches
    order = visit_order(len(source.train), batch, needed=batch * total, seed=config.seed,
                        shuffle=config.queue.shuffle)
    clock = TileClock(bench.warmup) if mode in SLIDE_BENCH_MODES else Clock(bench.warmup, batch)
    runner = PLAIN_MODES.get(mode)
    if runner is None:
        # Keras loads TensorFlow: only the modes that need it pay for it, in their own process
        from app.bench.keras_modes import KERAS_MODES

        runner = KERAS_MODES[mode]
    # a slide mode's own figures (its tiles and slides) beside the clock's
    own = runner(Run(mode=mode, config=config, queue=queue, source=source, augmenter=augmenter, order=order,
                     clock=clock))
    return {**clock.result(), **(own or {})}
