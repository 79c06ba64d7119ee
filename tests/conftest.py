"""Shared test helpers (marked.py, loaders.py) importable from every test folder, and by the
loader's spawned worker processes, which unpickle test sources by module name."""

import atexit
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The machine probe (app/capacity/probe.py) stores its figures here, not in the user's cache:
# measured once a session, by the first run that needs them, for the runs of every test after.
# Made by the process pytest starts (`make test`'s worker processes inherit it), removed by it.
if "APP_CACHE_DIR" not in os.environ:
    os.environ["APP_CACHE_DIR"] = tempfile.mkdtemp(prefix="app-test-cache-")
    atexit.register(shutil.rmtree, os.environ["APP_CACHE_DIR"], ignore_errors=True)
# The probe's own test measures this machine for real, first, into the session's cache: the runs
# that start meanwhile wait on the probe's lock and read its figures instead of measuring (20 s).
MEASURES_FIRST = "test_measured_once_stored_and_measured_again_elsewhere"
# The files that take 20 seconds or more of `make test`, slowest first: handed out first to its two worker
# processes (a file at a time), they end together instead of one waiting on the other. The documents' commands
# beside the probe's test: their JAX process measures JAX's figures meanwhile (the devices' runs would wait for
# TensorFlow's). The JAX runs with TensorFlow hidden after both: they read those JAX figures (this install's), and
# measured first they would store figures of a process without TensorFlow under this install's name.
SLOWEST_FIRST = ["cli/test_docs_commands.py", "cli/test_segmentation_cli.py", "cli/test_slide_segmentation_cli.py",
                 "training/test_devices.py", "cli/test_patches_cli.py", "cli/test_multilabel_cli.py",
                 "cli/test_bench_cli.py", "cli/test_train_cli.py", "cli/test_evaluate_predict_cli.py",
                 "cli/test_resume_cli.py", "cli/test_prepared_cli.py", "training/test_recipe.py", "test_config.py",
                 "cli/test_no_tensorflow_cli.py", "cli/test_export_cli.py", "cli/test_bands_cli.py",
                 "cli/test_table_cli.py", "cli/test_plan_cli.py", "cli/test_sweep_cli.py",
                 "cli/test_prepared_damage_cli.py"]
TESTS = Path(__file__).resolve().parent
# The suite's budget: `make test` within 10 minutes on two cores, a new capability adding at most
# 90 s of it. Where the time goes, a file at a time, ends every run (worker seconds: with two
# workers the wall clock is about half their sum).
FILE_SECONDS: dict[str, float] = defaultdict(float)
SHOWN_FILES = 15


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(item) -> tuple[bool, int]:
        where = Path(item.fspath).resolve().relative_to(TESTS).as_posix()
        return item.name != MEASURES_FIRST, rank.get(where, len(rank))

    items.sort(key=key)  # stable: the rest keep their order


@pytest.fixture
def children():
    """The child processes there are before a test, for loaders.assert_clean."""
    from loaders import workers_alive

    return workers_alive()


def pytest_runtest_logreport(report):
    FILE_SECONDS[report.nodeid.split("::")[0]] += report.duration  # setup, call and teardown each


def pytest_terminal_summary(terminalreporter):
    if not FILE_SECONDS:
        return
    total = sum(FILE_SECONDS.values())
    shown = min(SHOWN_FILES, len(FILE_SECONDS))
    terminalreporter.write_sep("-", f"seconds a test file: the {shown} slowest of {len(FILE_SECONDS)} files, "
                                    f"{total:.0f} s in all (the budget: tests/conftest.py)")
    for name, seconds in sorted(FILE_SECONDS.items(), key=lambda item: -item[1])[:SHOWN_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {name}")
