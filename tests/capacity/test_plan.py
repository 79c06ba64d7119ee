"""The memory plan's arithmetic: parts, fixes and the batch-size table (no TensorFlow here), and
the model's own figures (app/model.py: memory_facts)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from slides import slide_pixels, write_slide

from app.capacity.plan import (
    MARGIN,
    MIB,
    ModelFacts,
    Probe,
    Workload,
    batch_size_table,
    fits,
    fixes,
    predict,
    render,
    workload,
)
from app.capacity.run_plan import RunPlan
from app.data.slides.patches import grid_split
from app.loader.settings import Queue
from app.schema.data import FolderDataConfig, PatchesConfig

PROBE = Probe(trainer_mib=500.0, worker_mib=100.0, forked_worker_mib=20.0, fork_server_mib=80.0,
              worker_bytes_per_decoded_byte=2.0, worker_region_mib=10.0, forked_worker_region_mib=30.0,
              activation_factor=1.5, step_mib_per_layer=1.0)
MODEL = ModelFacts(parameter_bytes=10 * MIB, optimizer_bytes=20 * MIB, activation_bytes_per_sample=4 * MIB, layers=20)
WORK = Workload(batch_size=16, image_size=(512, 512), max_size=4, workers=2, processes=True,
                largest_decode_bytes=12 * MIB, device_is_host=True)


def test_the_host_peak_adds_each_part_and_the_device_on_a_cpu():
    plan = predict(WORK, PROBE, MODEL)
    batch = 16 * 512 * 512 * 3 / MIB  # 12 MiB of uint8
    parts = dict(plan.host)
    assert parts["TensorFlow and the app (this machine's probe)"] == 500
    assert parts["compiled train and test steps (20 layers × 1.00 MiB)"] == 20
    assert parts["the ring (4 slot(s) of one uint8 batch)"] == 4 * batch
    assert parts["2 worker processes (124 MiB each)"] == 2 * (100 + 2 * 12)
    assert dict(plan.device)["activations (estimate)"] == 1.5 * 4 * 16
    assert dict(plan.device)["uint8 batches (2: the step's, the next one copied ahead)"] == 2 * batch
    assert plan.device_mib == 2 * batch + 4 * batch + 2 * 10 + 20 + 96
    assert plan.host_mib == pytest.approx(500 + 20 + 3 * batch + 4 * batch + 248 + plan.device_mib)
    # negative control: with a GPU the device's share is apart from the host
    on_gpu = predict(dataclasses.replace(WORK, device_is_host=False), PROBE, MODEL)
    assert on_gpu.host_mib == pytest.approx(plan.host_mib - plan.device_mib) and on_gpu.device_mib == plan.device_mib
    # forked workers: each its own pages, the modules they share once in their fork server
    forked = predict(dataclasses.replace(WORK, forked=True), PROBE, MODEL)
    assert dict(forked.host)["2 worker processes (44 MiB each)"] == 2 * (20 + 2 * 12)
    assert dict(forked.host)["the fork server (the workers' modules, shared with them)"] == 80
    assert plan.host_mib - forked.host_mib == pytest.approx(2 * 100 - (2 * 20 + 80))
    # threads: no worker processes, their decode buffers in the training process
    threads = predict(dataclasses.replace(WORK, processes=False), PROBE, MODEL)
    assert plan.host_mib - threads.host_mib == pytest.approx(2 * 100)
    # what Pillow's own copies hold is added once a worker, not scaled by the probe's growth a byte of array
    pillow = predict(dataclasses.replace(WORK, largest_pillow_bytes=5 * MIB), PROBE, MODEL)
    assert dict(pillow.host)["2 worker processes (129 MiB each)"] == 2 * (100 + 2 * 12 + 5)
    # patches: a worker holds what region reads bring beside its decode (the probe's zarr and stores)
    regions = predict(dataclasses.replace(WORK, region_reads=True), PROBE, MODEL)
    assert dict(regions.host)["2 worker processes (134 MiB each)"] == 2 * (100 + 2 * 12 + 10)
    # forked, the reads cost the probe's forked figure (what a forked worker writes of the server's pages is its own)
    forked_regions = predict(dataclasses.replace(WORK, region_reads=True, forked=True), PROBE, MODEL)
    assert dict(forked_regions.host)["2 worker processes (74 MiB each)"] == 2 * (20 + 2 * 12 + 30)
    # the decoded chunks a loading process keeps: each worker's, or once beside loading threads
    kept = dataclasses.replace(regions.workload, kept_chunk_bytes=64 * MIB)
    assert dict(predict(kept, PROBE, MODEL).host)["2 worker processes (198 MiB each, 64 of them decoded chunks kept)"] \
        == 2 * (100 + 2 * 12 + 10 + 64)
    threaded = predict(dataclasses.replace(kept, processes=False), PROBE, MODEL)
    assert dict(threaded.host)["decoded chunks kept (data.patches.chunk_cache_mib)"] == 64
    assert predict(dataclasses.replace(regions.workload, processes=False), PROBE, MODEL).host_mib == \
        pytest.approx(threaded.host_mib - 64)  # negative control: none kept, none counted
    # JAX's preallocated GPU pool: its allocator's bookkeeping on the host, a line of its own
    pooled = predict(dataclasses.replace(on_gpu.workload, allocator_mib=3357.0), PROBE, MODEL)
    assert dict(pooled.host)["the GPU allocator's bookkeeping (1/32 of its preallocated pool)"] == 3357.0
    assert pooled.host_mib == pytest.approx(on_gpu.host_mib + 3357.0)
    assert not any("allocator" in name for name, _ in plan.host)  # negative control: none on a CPU


def test_a_loader_keeps_the_levels_its_patches_read_up_to_its_budget(tmp_path):
    write_slide(tmp_path / "slide.tif", slide_pixels(512, 0, np.random.default_rng(0))[0], levels=2, tile=128)
    patches = PatchesConfig(size=[64, 64], level=1, min_foreground=0.0)
    split = grid_split([str(tmp_path / "slide.tif")], patches)[0]
    level = 256 * 256 * 3  # level 1 of a 512² slide, in whole 128² chunks
    assert split.level_bytes() == {(str(tmp_path / "slide.tif"), 1): level}
    run = RunPlan(batch_size=4, device_is_host=True, queue=Queue())

    def kept(budget_mib: int) -> int:
        data = dataclasses.replace(FolderDataConfig(image_size=[64, 64]),
                                   patches=dataclasses.replace(patches, chunk_cache_mib=budget_mib))
        return workload(data, (0, 0), run, (split, split)).kept_chunk_bytes

    assert kept(64) == level and kept(0) == 0  # the level whole, under its budget; none asked, none kept


def test_fixes_name_the_largest_value_that_fits():
    plan = predict(WORK, PROBE, MODEL)
    limit = (plan.host_mib - 30) * (1 + MARGIN)  # three fewer 12 MiB slots fit (with the margin), two do not
    found = fixes(plan, PROBE, MODEL, limit)
    assert found[0].startswith("queue.max_size=1:")
    assert any(f.startswith("data.batch_size=") for f in found) and any(f.startswith("queue.workers=") for f in found)
    for fix in found:
        key, rest = fix.split("=")
        value = int(rest.split(":")[0])
        field = {"queue.max_size": "max_size", "data.batch_size": "batch_size", "queue.workers": "workers"}[key]
        assert fits(predict(dataclasses.replace(WORK, **{field: value}), PROBE, MODEL), limit)
        assert not fits(predict(dataclasses.replace(WORK, **{field: value + 1}), PROBE, MODEL), limit)
    assert fixes(plan, PROBE, MODEL, 10) == []  # nothing alone gets under the probe's own cost
    text = render(plan, ("queue.memory_budget_mb", limit), found)
    assert "does NOT fit queue.memory_budget_mb" in text and "queue.max_size=1" in text
    assert "\n  fits queue.memory_budget_mb" in render(plan, ("queue.memory_budget_mb", (plan.host_mib + 1) * 1.1))


def test_a_limit_admits_a_plan_only_with_the_margin_the_plan_holds_to():
    """The measured peak may be up to MARGIN above the plan: a plan just under the limit is not
    admitted, one MARGIN under it is."""
    plan = predict(WORK, PROBE, MODEL)
    assert MARGIN == 0.10
    assert not fits(plan, plan.host_mib) and not fits(plan, plan.host_mib * 1.09)
    assert fits(plan, plan.host_mib * 1.1 + 0.01)  # negative control
    text = render(plan, ("queue.memory_budget_mb", plan.host_mib + 1), [])
    assert f"does NOT fit queue.memory_budget_mb ({plan.host_mib + 1:.0f} MiB), with the plan's 10% margin" in text


def test_the_batch_size_table_marks_the_configs_row_and_column():
    table = batch_size_table(48, (224, 224))
    lines = table.splitlines()
    header = lines[1]
    assert "*224×224" in header and "| 1024×1024 |" in header and header.startswith("| batch | 32×32 |")
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[3:]}
    assert list(rows)[0] == "32" and list(rows)[-1] == "65536" and ">48" in rows and "48" not in rows
    # 64 × 1024² × 3 bytes = 0.1875 GiB of uint8, four times that in float32
    assert rows["64"].rstrip(" |").endswith("0.75 / 0.188")
    assert rows["65536"].rstrip(" |").endswith("768 / 192")
    # negative control: a batch and resolution in the grid add no row or column
    plain = batch_size_table(64, (512, 512)).splitlines()
    assert len(plain) == len(lines) - 1 and "*512×512" in plain[1] and "| >64 |" in "\n".join(plain)


def test_model_facts_count_variables_optimizer_slots_and_outputs():
    import keras

    from app.model import memory_facts

    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)  # 8·8·4 outputs, 3·3·3·4 + 4 weights
    outputs = keras.layers.Dense(2)(keras.layers.Flatten()(x))  # 256 + 2 outputs, 256·2 + 2 weights
    net = keras.Model(inputs, outputs)
    net.compile(optimizer="adam", loss="mse")
    facts = ModelFacts(**memory_facts(net, "float32"))
    weights = (3 * 3 * 3 * 4 + 4) + (256 * 2 + 2)
    assert facts.parameter_bytes == 4 * weights
    assert facts.activation_bytes_per_sample == 4 * (256 + 256 + 2)
    assert 2 * 4 * weights <= facts.optimizer_bytes <= 2 * 4 * weights + 64  # Adam: two slots, and its counters
    assert memory_facts(net, "mixed_float16")["activation_bytes_per_sample"] == 2 * (256 + 256 + 2)
    assert facts.layers == 3  # Conv2D, Flatten, Dense: each adds to the compiled steps
    sgd = keras.Model(inputs, outputs)
    sgd.compile(optimizer="sgd", loss="mse")
    assert memory_facts(sgd, "float32")["optimizer_bytes"] < 64  # negative control: plain SGD keeps no slots


def test_a_mask_beside_each_image_is_counted_in_the_ring_and_the_training_process():
    plan = dict(predict(dataclasses.replace(WORK, mask_itemsize=1), PROBE, MODEL).host)
    images, masks = 16 * 512 * 512 * 3 / MIB, 16 * 512 * 512 / MIB
    assert plan["the ring (4 slot(s) of one uint8 batch and its masks)"] == 4 * (images + masks)
    assert plan["uint8 batches and their masks in the training process (3)"] == 3 * (images + masks)
    wide = dict(predict(dataclasses.replace(WORK, mask_itemsize=2), PROBE, MODEL).host)  # uint16 masks: twice
    assert wide["the ring (4 slot(s) of one uint8 batch and its masks)"] == 4 * (images + 2 * masks)
    assert "the ring (4 slot(s) of one uint8 batch)" in dict(predict(WORK, PROBE, MODEL).host)  # negative control
