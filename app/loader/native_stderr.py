"""What C code prints in a worker process, named by the sample it came with: libjpeg's
"Corrupt JPEG data: 2 extraneous bytes before marker 0xd9" (a file that still decodes) and
OpenCV's warnings write straight to file descriptor 2 and would name no file.

Process workers only: a thread cannot take the process's descriptor 2 for itself. Never
imports TensorFlow, the model, training or the commands.
"""

from __future__ import annotations

import faulthandler
import os
import sys


class NativeStderr:
    """Descriptor 2 of this process, caught in a pipe: what is written there during a sample goes
    out again on the real stderr, each line after the sample's name. Python's own messages go
    straight to the real stderr."""

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
