"""Keras started on the run's backend (KERAS_BACKEND, JAX's XLA flags), start-up lines to the log; library versions."""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import sys
import tempfile
from contextlib import contextmanager
from importlib import metadata

from app.errors import config_error, install_command


@contextmanager
def native_stderr_captured():
    """Descriptor 2 to a temporary file during the block; the yielded list then gets what was written, as one string."""
    text: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield text
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text.append(captured.read().decode("utf-8", "replace"))


@contextmanager
def native_stderr_to_log():
    """Descriptor 2 goes to a temporary file while the block runs; what was written there goes to the log afterwards."""
    text: list[str] = []
    try:
        with native_stderr_captured() as text:
            yield
    finally:
        native_lines_to_log("".join(text))


def use_backend(trainer, backend=None) -> None:
    """The backend as KERAS_BACKEND, with JAX's XLA flags; a ConfigError if not installed or Keras runs another."""
    name = (backend or trainer.backend).value
    if name == "auto":  # app/config.py resolves it where either is installed
        raise config_error("trainer.backend", name, "TensorFlow or JAX, and neither is installed in this environment: "
                           f"{install_command('tensorflow')} (the default backend), or {install_command('jax')} to "
                           "train on JAX without TensorFlow (on GPUs also jax[cuda12], as JAX's install guide says)")
    if "keras" in sys.modules:
        current = sys.modules["keras"].backend.backend()
        if current != name:
            raise config_error("trainer.backend", name, f"Keras runs on {current} in this process already, and "
                               "its backend is fixed once it loads; sweep over trainer.backend with a launcher "
                               "that starts a process a job (hydra/launcher=joblib)")
        return
    if importlib.util.find_spec(name) is None:
        raise config_error("trainer.backend", name, f"{name} is not installed in this environment: "
                           + (f"{install_command('jax')} (on GPUs also jax[cuda12], as JAX's install guide says)"
                              if name == "jax" else f"{install_command('tensorflow')} brings it (`make` installs it), "
                              f"or train on JAX: {install_command('jax')} and trainer.backend=jax (or auto)"))
    os.environ["KERAS_BACKEND"] = name
    if name == "jax":
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
                 if not f.startswith(("--xla_force_host_platform_device_count", "--xla_gpu_deterministic_ops"))]
        if trainer.cpu_devices > 1:
            flags.append(f"--xla_force_host_platform_device_count={trainer.cpu_devices}")
        if trainer.deterministic:
            flags.append("--xla_gpu_deterministic_ops=true")
        os.environ["XLA_FLAGS"] = " ".join(flags)


def load_keras():
    """`import keras` (and TensorFlow under it), its start-up lines sent to the log."""
    if "keras" not in sys.modules:
        with native_stderr_to_log():
            import keras  # noqa: F401
    return sys.modules["keras"]


def query_devices_quietly() -> None:
    """The backend's first device query, its native "no GPU" lines sent to the log; for a command on one device."""
    with native_stderr_to_log():
        if os.environ.get("KERAS_BACKEND") == "jax":
            import jax

            jax.devices()
        else:
            import tensorflow as tf

            tf.config.list_logical_devices()


def load_tensorflow():
    """TensorFlow, its start-up lines sent to the log; beside Keras on JAX, kept off the GPUs JAX uses."""
    if "tensorflow" not in sys.modules:
        with native_stderr_to_log():
            import tensorflow as tf

            if os.environ.get("KERAS_BACKEND") == "jax":
                tf.config.set_visible_devices([], "GPU")
    return sys.modules["tensorflow"]


def native_lines_to_log(text: str) -> None:
    """`text` (native start-up lines) appended to the root logger's log files, or to stderr without one."""
    if not text.strip():
        return
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    if not files:  # no log file (a library user): the lines are theirs to see
        sys.stderr.write(text)
        return
    for handler in files:
        handler.acquire()
        try:
            handler.stream.write(text if text.endswith("\n") else text + "\n")
            handler.flush()
        finally:
            handler.release()


RUN_PACKAGES = ("tensorflow", "keras", "jax", "albumentations", "numpy", "hydra-core")


def versions(packages: tuple[str, ...] = RUN_PACKAGES) -> dict[str, str]:
    """Python's and the installed versions of `packages` (by default, the libraries a run depends on)."""
    found = {"python": platform.python_version()}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
