"""Training's own code for capacity: the probe's `trainer_measures`, `time_step` for `auto`, `planner` and `probed`."""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import keras
import numpy as np

from app.capacity import queue_plan
from app.capacity.plan import MIB, ModelFacts
from app.capacity.probe import high_water, reset_high_water, resident
from app.capacity.run_plan import RunPlan
from app.model import classifier, memory_facts, small_resnet
from app.tracking.dashboards import TensorBoardWriter
from app.training import devices, epochs, steps  # noqa: F401 - epochs: loaded as `train` has it loaded when it trains

CALIBRATION = {"image_size": (128, 128), "batches": (4, 32)}
# Steps at each calibration batch size, each one's own peak (VmHWM reset before it), the median
# taken: a one-off spike of the allocator in one step moved the factor from 0.76 to 0.93 when the
# process's high-water mark was read instead.
STEPS = 5
STEP_CALLS = 3  # timed calls into the compiled step for `auto`, after one that traces it


def planner(config, run: RunPlan, source, net) -> queue_plan.Planner:
    """The queue Planner of `net` on `source`'s splits (the GPU pool's host share in); the probe spawned if unstored."""
    facts = model_facts(net, config.trainer.precision.value)
    run = dataclasses.replace(run, allocator_mib=devices.allocator_host_mib(config.trainer))
    return queue_plan.planner(config, run, (source.train, source.val), facts=facts, trainer_measures=trainer_measures)


def probed(plans: queue_plan.Planner, split, net, class_weights=None) -> RunPlan:
    """The run plan, its `auto` queue values chosen by the probe, `net`'s step timed (unchanged when none)."""
    return queue_plan.probed(plans, split, partial(time_step, net, class_weights=class_weights))


def model_facts(net, precision: str) -> ModelFacts:
    return ModelFacts(**memory_facts(net, precision))


def trainer_measures() -> dict:
    """In the probe: a trainer's base, a layer's compiled steps and the activation factor; Keras cleared after."""
    if keras.backend.backend() == "jax":  # as a JAX run has it: TensorFlow too, where installed
        devices.load_tensorflow_beside_jax()
    tiny = classifier(small_resnet((16, 16, 3), 2, widths=[4]), (16, 16))
    _steps(tiny, (16, 16), [2, 2])
    with tempfile.TemporaryDirectory(prefix="app-probe-") as tmp:
        writer = TensorBoardWriter(Path(tmp))
        writer.scalars("train", {"loss": 1.0}, 1)
        writer.finish_and_upload("completed")
        tiny.save(Path(tmp) / "model.keras")
    with_tiny, before = high_water(), resident()
    size, (small, large) = CALIBRATION["image_size"], CALIBRATION["batches"]
    net = classifier(small_resnet((*size, 3), 4), size)
    marks = _steps(net, size, [small] * STEPS + [large] * STEPS)
    facts = model_facts(net, "float32")
    settled_small, settled_large = statistics.median(marks[:STEPS]), statistics.median(marks[STEPS:])
    factor = max((settled_large - settled_small) / ((large - small) * facts.activation_bytes_per_sample), 0.0)
    held = 4 * small * size[0] * size[1] * 3 + 2 * facts.parameter_bytes + facts.optimizer_bytes
    activations = factor * small * facts.activation_bytes_per_sample
    per_layer = max(settled_small - before - held - activations, 0) / facts.layers
    tiny_layers = model_facts(tiny, "float32").layers
    keras.backend.clear_session()
    return {"trainer_mib": (with_tiny - per_layer * tiny_layers) / MIB, "activation_factor": factor,
            "step_mib_per_layer": per_layer / MIB}


def _steps(net, size: tuple[int, int], batches: list[int]) -> list[int]:
    """`net` compiled, a test step, then a train step for each size in `batches`; the high-water mark after each."""
    net.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    steps.build_step_variables(net)  # as `train` has them before its first step (JAX needs them)
    net.make_train_function()
    net.make_test_function()
    test = steps.Feed([_zeros(batches[0], size)], 1).calls(net, "test")
    test()
    test.sync()  # JAX: the variables back in the model for the next function
    calls = steps.Feed([_zeros(b, size) for b in batches], len(batches)).calls(net, "train")
    marks = []
    for _ in batches:
        reset_high_water()
        calls()
        marks.append(high_water())
    calls.sync()
    return marks


def _zeros(batch: int, size: tuple[int, int]) -> tuple:
    return np.zeros((batch, *size, 3), np.uint8), np.zeros(batch, np.int64)


def time_step(net, batch: tuple, class_weights=None) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds a step in each of STEP_CALLS calls on `batch`, after one that traces it; `net` put back."""
    steps.build_step_variables(net)  # before the train function exists (JAX fixes its state's shape then)
    calls_needed = 1 + STEP_CALLS
    feed = steps.Feed([batch] * calls_needed * net.steps_per_execution, calls_needed * net.steps_per_execution,
                      class_weights)
    times, cpu = [], []
    with kept(net):
        net.make_train_function()
        step_calls = feed.calls(net, "train")
        for _ in range(calls_needed):
            started, started_cpu = time.perf_counter(), time.process_time()
            logs = step_calls()
            float(np.asarray(logs["loss"]))  # the step has finished on the device
            times.append((time.perf_counter() - started) / net.steps_per_execution)
            cpu.append((time.process_time() - started_cpu) / net.steps_per_execution)
        step_calls.sync()
    feed.close()
    return times[1:], cpu[1:]


def _variables(net) -> list:
    """Every variable a training step may change: the layers', the optimizer's, the metrics'."""
    return [*net.trainable_variables, *net.non_trainable_variables, *net.optimizer.variables,
            *net.metrics_variables]


@contextmanager
def kept(net):
    """Every variable of `net` as on entry, put back on exit; an error if the probe created one."""
    variables = _variables(net)
    saved = [np.array(v.numpy(), copy=True) for v in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
    if len(_variables(net)) != len(saved):
        raise RuntimeError("the queue probe's training step created variables it cannot put back")
