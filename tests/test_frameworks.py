"""trainer.backend set before Keras loads, in a fresh interpreter each (Keras's backend is
fixed once it loads)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SETUP = """
import importlib.util, os, sys
from types import SimpleNamespace
from app.frameworks import use_backend
from app.schema import Backend
def trainer(backend, cpu_devices=1, deterministic=False):
    return SimpleNamespace(backend=Backend(backend), cpu_devices=cpu_devices, deterministic=deterministic)
"""


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SETUP + code], capture_output=True, text=True, timeout=300)


def test_jax_gets_its_flags_before_it_starts_and_a_missing_backend_is_named():
    done = python("""
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8 --other"
use_backend(trainer("jax", cpu_devices=2, deterministic=True))
print(os.environ["KERAS_BACKEND"], os.environ["XLA_FLAGS"], "keras" in sys.modules)
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "jax" else real(name, *a)
try:
    use_backend(trainer("jax"))
except Exception as error:
    print(type(error).__name__, error)
""")
    assert done.returncode == 0, done.stderr[-2000:]
    flags, missing = done.stdout.splitlines()
    assert flags == ("jax --other --xla_force_host_platform_device_count=2 --xla_gpu_deterministic_ops=true False")
    assert missing.startswith("ConfigError") and "`trainer.backend`" in missing and "pip install -e '.[jax]'" in missing


@pytest.mark.slow
def test_keras_loaded_on_one_backend_refuses_another():
    done = python("""
use_backend(trainer("tensorflow"))
import keras
use_backend(trainer("tensorflow"))  # the same: nothing to do
try:
    use_backend(trainer("jax"))
except Exception as error:
    print(type(error).__name__, error)
""")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ConfigError") and "Keras runs on tensorflow in this process already" in done.stdout
