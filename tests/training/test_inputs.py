"""A training run's set-up before the model (app/training/inputs.py, app/training/trainer.py):
the data and split.json, this process's share of a batch, its loader, and a refused config
recorded in summary.json."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile
from hydra import compose, initialize_config_dir

from app.capacity.auto import resolved
from app.capacity.run_plan import RunPlan
from app.config import conf_dir, load
from app.data.pixels.pixels import run_pixels
from app.errors import ConfigError, DataError
from app.loader.order import epoch_order
from app.schema import Sampling, register
from app.training import inputs
from app.training.devices import Placement

TINY = ["data.num_images=24", "data.source_size=32", "data.num_classes=3", "data.batch_size=4",
        "data.image_size=[8,8]", "queue.workers=1", "queue.use_multiprocessing=false", "queue.max_size=2"]


def composed(*overrides: str, typed: bool = True):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return load(cfg) if typed else cfg


def test_a_new_run_writes_split_json_and_a_resume_checks_it(tmp_path):
    config = composed(*TINY, f"data.path={tmp_path / 'data'}")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    source, steps = inputs.read_data(config, run_dir)
    assert not (run_dir / "split.json").exists()  # negative control: reading writes nothing
    inputs.delete_partial_records_and_write_split(run_dir, source)
    assert steps == len(source.train) // 4 and json.loads((run_dir / "split.json").read_text())
    resumed = composed(*TINY, f"data.path={tmp_path / 'data'}", f"+resume={run_dir}")
    assert inputs.read_data(resumed, run_dir)[1] == steps  # checked against split.json
    with pytest.raises(ConfigError, match="trainer.steps_per_epoch"):
        inputs.read_data(composed(*TINY, f"data.path={tmp_path / 'data'}", "trainer.steps_per_epoch=99"), run_dir)


def test_each_process_loads_its_share_of_a_batch(tmp_path):
    config = composed(*TINY, f"data.path={tmp_path / 'data'}", "data.batch_size=8")
    source, _ = inputs.read_data(config, tmp_path)
    one, two = Placement(strategy_name="default", devices=["/device:CPU:0"]), Placement(
        strategy_name="data_parallel", devices=["/device:CPU:0"], processes=2)
    plans = [RunPlan.of(config.data, processes=p.processes, device_is_host=True).chosen(resolved(config.queue))
             for p in (one, two)]
    assert [plan.batch_size for plan in plans] == [8, 4]
    whole, half = (inputs.run_loader(config, plan, source, run_dir=tmp_path, placement=p)
                   for plan, p in zip(plans, (one, two), strict=True))
    assert whole.queue_bytes == 2 * half.queue_bytes == 2 * 8 * 8 * 8 * 3 and half.queue.workers == 1
    assert not half.queue.use_multiprocessing
    assert config.data.batch_size == 8  # the config as written


def test_the_queue_log_line_names_the_runs_integer_type(tmp_path, caplog):
    for name in ("a", "b"):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(6):
            tifffile.imwrite(tmp_path / "data" / name / f"{i}.tif", np.full((8, 8, 3), 1000 * (i + 1), np.uint16))
    for dtype, bytes_a_pixel in (("uint8", 1), ("uint16", 2)):  # uint8: the negative control
        config = composed(*TINY[3:], "data=folder", f"data.path={tmp_path / 'data'}", f"data.dtype={dtype}")
        source, _ = inputs.read_data(config, tmp_path)
        plan = RunPlan.of(config.data, device_is_host=True, pixels=run_pixels(config.data, source.train))
        plan = plan.chosen(resolved(config.queue))
        caplog.clear()
        with caplog.at_level("INFO", logger="app.train"):
            loader = inputs.run_loader(config, plan, source, run_dir=tmp_path, placement=Placement(
                strategy_name="default", devices=["/device:CPU:0"]))
        assert loader.queue_bytes == 2 * 4 * 8 * 8 * 3 * bytes_a_pixel and f"MiB of {dtype} batches" in caplog.text


def test_a_refused_config_is_recorded_in_summary_json(tmp_path):
    """trainer.run refuses a bad config for a new run before anything trains, summary.json
    saying why (a sweep's report shows the job as failed, with the reason)."""
    from app.training.trainer import run

    with pytest.raises(ConfigError, match="trainer.epochs"):
        run(composed(*TINY, "trainer.epochs=0", typed=False), tmp_path, ["trainer.epochs=0"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "trainer.epochs" in summary["message"]
    assert summary["overrides"] == ["trainer.epochs=0"] and not (tmp_path / "split.json").exists()


def test_sampling_weights_balance_the_classes_or_follow_the_table(caplog):
    source = SimpleNamespace(train=SimpleNamespace(labels=np.array([0] * 9 + [1])), class_names=["cat", "dog"],
                             train_weights=np.arange(10, dtype=float))
    data = SimpleNamespace(sampling=Sampling.uniform)
    assert inputs.sampling_weights(data, source) is None  # negative control: each sample once
    data.sampling = Sampling.balanced
    with caplog.at_level("INFO", logger="app.train"):
        weights = inputs.sampling_weights(data, source)
    assert weights[:9].sum() == pytest.approx(weights[9]) and "classes cat 50 %, dog 50 %" in caplog.text
    data.sampling = Sampling.weights
    assert inputs.sampling_weights(data, source).tolist() == pytest.approx([i / 9 for i in range(10)])
    source.train_weights = np.array([1e308] * 2 + [1.0] * 8)  # a sum past float's range: still drawn
    drawn = epoch_order(10, seed=0, epoch=0, shuffle=True, weights=inputs.sampling_weights(data, source))
    assert set(drawn.tolist()) <= {0, 1}
    source.train_weights = np.zeros(10)
    with pytest.raises(DataError, match="every training sample's weight is 0"):
        inputs.sampling_weights(data, source)


def test_the_rows_a_table_leaves_out_start_bad_samples_txt_with_their_lines(tmp_path):
    from PIL import Image

    (tmp_path / "images").mkdir()
    rows = ["path,label"]
    for i in range(12):
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / f"{i}.png")
        rows.append(f"images/{i}.png,{'ab'[i % 2]}")
    rows.append("images/gone.png,a")  # line 14
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    config = composed("data=table", f"data.table={tmp_path / 't.csv'}", "data.on_bad_sample=skip",
                      "data.max_bad_fraction=0.1", "data.batch_size=2")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    source, _ = inputs.read_data(config, run_dir)
    inputs.delete_partial_records_and_write_split(run_dir, source)
    listed = (run_dir / "bad_samples.txt").read_text().splitlines()
    assert len(listed) == 1 and listed[0].startswith("table\t14\t") and "gone.png cannot be read" in listed[0]
    (run_dir / "bad_samples.txt").unlink()
    clean = composed("data=table", f"data.table={tmp_path / 't.csv'}", "data.on_bad_sample=skip",
                     "data.max_bad_fraction=0.1", "data.batch_size=2", "data.root=" + str(tmp_path))
    (tmp_path / "t.csv").write_text("\n".join(rows[:-1]) + "\n")  # negative control: none left out, none listed
    inputs.delete_partial_records_and_write_split(run_dir, inputs.read_data(clean, run_dir)[0])
    assert not (run_dir / "bad_samples.txt").exists()
