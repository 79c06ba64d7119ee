"""Starting TensorFlow and Keras quietly: the native lines they print while starting (absl's
"All log messages before absl::InitializeLog()", oneDNN's notice, cudart's and cuInit's "no GPU")
go to the command's log file, not the terminal. TF_CPP_MIN_LOG_LEVEL alone does not hide them
in TensorFlow 2.21: they are written to file descriptor 2 before that setting is read. Never
imported by loader workers."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from contextlib import contextmanager


@contextmanager
def native_stderr_to_log():
    """File descriptor 2 goes to a temporary file while the block runs; what was written there is
    appended to the log files of the root logger (Hydra's `<job>.log`) afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            _to_log_files(captured.read().decode("utf-8", "replace"))


def load_keras():
    """`import keras` (and TensorFlow under it), its start-up lines sent to the log."""
    if "keras" not in sys.modules:
        with native_stderr_to_log():
            import keras  # noqa: F401
    return sys.modules["keras"]


def _to_log_files(text: str) -> None:
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
