"""`python -m app bench` end to end: every mode runs in its own process and is reported. The refused and
failing benches share a process kept for the module (tests/docs_runner.py's OneProcess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import s3fs
from docs_runner import OneProcess, spawn_one_process_for
from PIL import Image
from s3_endpoint import CREDENTIALS, endpoint, environment, new_bucket
from venvs import env_hiding_tensorflow

from app.bench.loading import reason, visit_order
from app.commands.bench import _raise_if_all_failed
from app.errors import AppError
from app.schema import BENCH_MODES

# Put first on PYTHONPATH, it makes every Python process (the bench's modes' too) find no
# `tensorflow`, as where it is not installed: nothing in sys.modules, find_spec None, import fails.
MEMORY_TEST_MODES = ("baseline", "loader_steps", "serial")  # the rest run in test_bench_reports_every_mode
PATCH_MODES = ("keras_regions",)  # on slides' patches: tests/cli/test_patches_cli.py
S3 = {"key": CREDENTIALS["AWS_ACCESS_KEY_ID"], "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}


@pytest.fixture(scope="module")
def app():
    """`python -m app <args>` in `cwd`, in one process for the module's refused and failing benches."""
    with OneProcess() as one_process:
        yield one_process


def bench(tmp_path, *args):
    small = ["data.num_images=24", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
             "data.batch_size=4", "bench.batches=3", "bench.warmup=1", "hydra.run.dir=bench"]
    result = subprocess.run([sys.executable, "-m", "app", "bench", *small, *args], capture_output=True, text=True,
                            cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, json.loads((tmp_path / "bench" / "bench.json").read_text())


@pytest.mark.slow
def test_bench_reports_every_mode(tmp_path):
    """Each mode the next test does not run once, timed only (the memory run is the next test's);
    one worker: a second only starts another process in four of the modes (7 s), and nothing here
    counts workers."""
    modes = [m for m in BENCH_MODES if m not in MEMORY_TEST_MODES + PATCH_MODES]
    result, report = bench(tmp_path, "bench.memory=false", "queue.workers=1", f"bench.modes=[{','.join(modes)}]")
    assert list(report["results"]) == modes
    assert set(modes) | set(MEMORY_TEST_MODES) | set(PATCH_MODES) == set(BENCH_MODES)
    for mode, r in report["results"].items():
        assert "error" not in r, (mode, r.get("traceback"))
        assert r["timed_batches"] == 3 and r["images_per_s"] > 0 and r["first_batch_s"] >= 0, mode
        assert "peak_memory_mb" not in r and "peak_pss_mb" not in r and "pss_samples" not in r, mode
    results, derived = report["results"], report["derived"]
    assert derived["queue_bytes"] == 2 * 4 * 32 * 32 * 3 and "memory_bound_mb" not in derived
    assert derived["keras_best_images_per_s"] == max(results["keras_threads"]["images_per_s"],
                                                     results["keras_processes"]["images_per_s"])
    assert "| loader_fit |" in result.stdout and "| - |" in result.stdout
    assert (tmp_path / "bench" / "bench.log").exists()
    # the modes' TensorFlow start-up lines go to bench.log, not the terminal
    assert "oneDNN" not in result.stderr and "absl::InitializeLog" not in result.stderr
    assert "oneDNN" in (tmp_path / "bench" / "bench.log").read_text()  # negative control: they are there


@pytest.mark.slow
@pytest.mark.exhaustive
def test_bench_on_jax_without_tensorflow_runs_the_keras_modes(tmp_path):
    """trainer.backend=jax where TensorFlow cannot be imported: the modes through Keras run (each
    in its own process: none imports TensorFlow, or it would fail); tf_data named is refused
    before any mode runs.
    Covered in `make test` by: bench's every mode on TensorFlow (above) and the JAX commands without
    TensorFlow (tests/cli/test_no_tensorflow_cli.py), whose step loop the Keras modes time."""
    env = env_hiding_tensorflow(tmp_path / "hidden")
    small = ["trainer.backend=jax", "data.num_images=24", "data.source_size=64", "data.num_classes=3",
             "data.image_size=[32,32]", "data.batch_size=4", "bench.batches=2", "bench.warmup=1", "bench.memory=false",
             "queue.workers=1"]
    keras_modes = ["baseline", "loader_steps", "loader_fit", "keras_threads"]  # the others load no framework
    refused, ran = spawn_one_process_for(["bench", *small, "bench.modes=[tf_data,loader]", "hydra.run.dir=refused"],
                                         ["bench", *small, f"bench.modes=[{','.join(keras_modes)}]",
                                          "hydra.run.dir=bench"], cwd=tmp_path, env=env)
    assert refused.returncode == 2 and "config key `bench.modes`" in refused.stderr, refused.stderr[-3000:]
    assert "needs the package `tensorflow`" in refused.stderr and "pip install -e '.[tensorflow]'" in refused.stderr
    assert not (tmp_path / "refused" / "bench.json").exists()  # refused before any mode ran
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert list(report["results"]) == keras_modes  # the default list without tf_data: tests/bench/test_modes.py
    for mode, r in report["results"].items():
        assert "error" not in r and r["timed_batches"] == 2, (mode, r.get("traceback"))


@pytest.mark.slow
@pytest.mark.exhaustive
def test_bench_memory_run_samples_a_second_run(tmp_path):
    """bench.memory's second, sampled run of each mode. Covered in `make test` by: bench's every mode,
    timed (test_bench_reports_every_mode), and the sampler itself (tests/capacity/test_memory.py)."""
    result, report = bench(tmp_path, f"bench.modes=[{','.join(MEMORY_TEST_MODES)}]")
    results = report["results"]
    assert list(results) == list(MEMORY_TEST_MODES)
    for mode, r in results.items():
        # peak memory from a second run, sampled; the timed run was not
        assert r["peak_memory_mb"] > 0 and r["memory_samples"] >= r["memory_reads"] >= 1, mode
        assert r["sampled_images_per_s"] > 0, mode
        # the names of the days of PSS: the same figures, for scripts that read them
        assert (r["peak_pss_mb"], r["pss_samples"], r["pss_reads"]) == \
               (r["peak_memory_mb"], r["memory_samples"], r["memory_reads"]), mode
    # a process that imports TensorFlow weighs far more than one that only decodes images
    assert results["serial"]["peak_memory_mb"] < results["baseline"]["peak_memory_mb"]
    assert report["derived"]["memory_bound_mb"] > results["baseline"]["peak_memory_mb"]
    assert "peak memory (MiB)" in result.stdout
    assert "loader_steps_peak_within_bound" in report["derived"] and "| serial |" in result.stdout


@pytest.mark.slow
def test_bench_runs_each_mode_on_prepared_copies_beside_the_originals(tmp_path):
    """A mode without a model (its processes never load TensorFlow: cheap) on the originals and on
    a prepared copy of them, in a folder and in a bucket of a local S3 endpoint (by byte ranges, and
    through a shard cache), in one run; a copy of other data is refused before any timing."""
    data = ["data.num_images=24", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
            "data.batch_size=4", "queue.workers=1"]
    other = ["data.num_images=24", "data.source_size=64", "data.num_classes=3"]  # other files: another fingerprint
    fs = s3fs.S3FileSystem(**S3, endpoint_url=endpoint(), skip_instance_cache=True)
    url, copy = f"s3://{new_bucket(fs)}/copy", str(tmp_path / "copy")
    env = {**os.environ, **environment()}
    prepared = spawn_one_process_for(["prepare", *data, f"prepare.out={copy}", "hydra.run.dir=prepare"],
                                     cwd=tmp_path, env=env)[0]
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    fs.put(copy, url.removeprefix("s3://"), recursive=True)
    results = spawn_one_process_for(
        ["bench", *data, "bench.batches=3", "bench.warmup=1", "bench.modes=[serial]", "bench.memory=false",
         f"bench.prepared=[{copy},{url}]", f"bench.cache_dir={tmp_path / 'cache'}", "hydra.run.dir=bench"],
        ["bench", *data, *other, "bench.modes=[serial]", f"bench.prepared=[{copy}]", "hydra.run.dir=other"],
        cwd=tmp_path, env=env)
    assert results[0].returncode == 0, results[0].stderr[-3000:]
    report = json.loads((tmp_path / "bench" / "bench.json").read_text())
    copies = [copy, url, f"{url} cached"]
    assert list(report["results"]) == ["serial", *(f"serial@{c}" for c in copies)]
    for name, r in report["results"].items():
        assert "error" not in r and r["timed_batches"] == 3, (name, r.get("traceback"))
    results_, derived = report["results"], report["derived"]
    assert derived[f"serial@{copy}_vs_original"] == \
        results_[f"serial@{copy}"]["images_per_s"] / results_["serial"]["images_per_s"]
    assert derived[f"serial@{url} cached_vs_first_copy"] == \
        results_[f"serial@{url} cached"]["images_per_s"] / results_[f"serial@{copy}"]["images_per_s"]
    assert f"| serial@{copy} |" in results[0].stdout and f"serial@{copy}_vs_original" in results[0].stdout
    assert len(list((tmp_path / "cache").glob("*/train-*.tar"))) >= 1  # the cached rows read through it
    refused = results[1]
    assert refused.returncode != 0 and "bench.prepared" in refused.stderr
    assert "not of the data benched" in refused.stderr
    assert not (tmp_path / "other" / "bench.json").exists()  # refused before any mode ran


@pytest.mark.slow
def test_bench_rejects_an_unknown_mode(tmp_path, app):
    result = app("bench", "bench.modes=[loader,warp]", cwd=tmp_path)
    assert result.returncode == 2 and "bench.modes" in result.stderr and "warp" in result.stderr
    assert "Error executing job" not in result.stderr  # Hydra's own line above the paragraph


@pytest.mark.slow
def test_bench_where_every_mode_fails_exits_non_zero_with_the_real_cause(tmp_path, app):
    """A folder with an unreadable image: tf_data's reason is TensorFlow's own message, found
    below its "Graph execution error:"; nothing measured is an error."""
    for name in ("a", "b"):
        folder = tmp_path / "images" / name
        folder.mkdir(parents=True)
        for i in range(5):
            Image.fromarray(np.full((40, 40, 3), 40 * i, np.uint8)).save(folder / f"{i}.png")
        (folder / "bad.jpg").write_bytes(b"not an image")
    result = app("bench", "data=folder", f"data.path={tmp_path / 'images'}", "data.image_size=[32,32]",
                 "data.batch_size=4", "bench.batches=2", "bench.warmup=1", "bench.memory=false",
                 "bench.modes=[tf_data,serial]", "hydra.run.dir=bench", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    results = json.loads((tmp_path / "bench" / "bench.json").read_text())["results"]
    assert results["tf_data"]["error"].startswith("InvalidArgumentError: Unknown image file format")
    assert "bad.jpg: cannot identify image file" in results["tf_data"]["error"]  # TensorFlow's decoder names no file
    assert "Graph execution error" in results["tf_data"]["traceback"]  # negative control: what it was
    assert "every bench mode failed" in result.stderr and "tf_data: InvalidArgumentError: Unknown" in result.stderr
    assert "bad.jpg" in results["serial"]["error"] and "| serial | failed:" in result.stdout
    # tf_data's process exits by itself once its error is sent: not held a minute, then killed
    assert "did not exit within" not in (tmp_path / "bench" / "bench.log").read_text()


@pytest.mark.slow
def test_bench_with_one_mode_measured_is_no_error(tmp_path):
    results = {"tf_data": {"error": "InvalidArgumentError: Unknown image file format"}, "loader": {"images_per_s": 9}}
    _raise_if_all_failed(results, tmp_path)
    with pytest.raises(AppError, match=r"the first, tf_data: InvalidArgumentError: Unknown image file format\. "):
        _raise_if_all_failed({"tf_data": results["tf_data"]}, tmp_path)


def test_a_python_error_inside_a_tensorflow_error_is_the_reason():
    class UnknownError(Exception):
        pass

    carried = ("Graph execution error:\n\nDetected at node PyFunc defined at (most recent call last):\n<stack "
               "traces unavailable>\nDataError: sample 3 (x.jpg) could not be loaded\nTraceback (most recent call "
               "last):\n\n  File \"a.py\", line 1, in f\n\n\t [[{{node PyFunc}}]]")
    assert reason(UnknownError(carried)) == "DataError: sample 3 (x.jpg) could not be loaded"
    assert reason(ValueError("first\nsecond")) == "ValueError: first"  # negative control: a plain error


@pytest.mark.slow
def test_bench_on_fewer_samples_than_a_batch_is_refused_not_left_spinning(tmp_path, app):
    """No full batch in the training split: no mode could time one (it spun until killed)."""
    result = app("bench", "data.num_images=24", "data.source_size=32", "bench.modes=[loader]", "bench.memory=false",
                 cwd=tmp_path)
    assert result.returncode == 2 and "config key `data.batch_size`" in result.stderr, result.stderr[-2000:]
    assert "at most the 20 samples of the training split" in result.stderr
    assert len(visit_order(20, 4, needed=12, seed=0, shuffle=True)) == 12  # negative control: batches fit
    with pytest.raises(ValueError, match="no full batch"):
        visit_order(20, 32, needed=12, seed=0, shuffle=True)
