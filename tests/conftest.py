"""Shared test helpers (marked.py, loaders.py) importable from every test folder, and by the
loader's spawned worker processes, which unpickle test sources by module name."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The machine probe (app/capacity/probe.py) stores its figures here, not in the user's cache:
# measured once a session, by the first run that needs them, for the runs of every test after.
os.environ["APP_CACHE_DIR"] = tempfile.mkdtemp(prefix="app-test-cache-")
atexit.register(shutil.rmtree, os.environ["APP_CACHE_DIR"], ignore_errors=True)
# The probe's own test measures this machine for real; run first, it leaves its figures in the
# session's cache, and the runs after it read them instead of measuring again (25 s).
MEASURES_FIRST = "test_measured_once_stored_and_measured_again_elsewhere"


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.name != MEASURES_FIRST)  # stable: the rest keep their order


@pytest.fixture
def children():
    """The child processes there are before a test, for loaders.assert_clean."""
    from loaders import workers_alive

    return workers_alive()
