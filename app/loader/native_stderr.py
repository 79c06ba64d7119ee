"""C libraries' stderr in a worker process (libjpeg, OpenCV warnings), each line named by its sample; processes only."""

from __future__ import annotations

import faulthandler
import os
import sys


class NativeStderr:
    """Descriptor 2 caught in a pipe, its lines re-sent named by the sample; sys.stderr bypasses it."""

    def __init__(self) -> None:
        self.real = os.dup(2)
        self.caught, write = os.pipe()
        os.set_blocking(self.caught, False)
        os.set_blocking(write, False)  # a flood of lines is cut short, never a hung worker
        os.dup2(write, 2)
        os.close(write)
        sys.stderr = open(self.real, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
        if faulthandler.is_enabled():  # a crash's stack must not end in the pipe
            faulthandler.enable(sys.stderr)

    def write_named(self, where: str) -> None:
        """Write what C code printed since the last call to the real stderr, each line named by `where`."""
        try:
            text = os.read(self.caught, 1 << 16)
        except BlockingIOError:  # nothing printed: the usual case
            return
        lines = [line for line in text.decode("utf-8", "replace").splitlines() if line.strip()]
        if lines:
            os.write(self.real, "".join(f"warning: {where}: {line}\n" for line in lines).encode())
