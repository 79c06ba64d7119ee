"""Shared test helpers (marked.py, loaders.py) importable from every test folder, and by the
loader's spawned worker processes, which unpickle test sources by module name."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def children():
    """The child processes there are before a test, for loaders.assert_clean."""
    from loaders import workers_alive

    return workers_alive()
