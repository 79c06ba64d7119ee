"""Virtual environments of this one's packages less some, and this one with TensorFlow made unimportable, for the tests
of what an install without an extra does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path


def venv_without(folder: Path, hidden: re.Pattern) -> Path:
    """A venv in `folder` whose site-packages links to each entry of this one's that `hidden`
    does not match: the same versions of everything else. Its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    there = next((folder / "lib").glob("python3.*/site-packages"))
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not hidden.match(entry.name):
            (there / entry.name).symlink_to(entry)
    return there


# A sitecustomize that makes TensorFlow unimportable (find_spec finds nothing), the rest of this install as it is
HIDING_TENSORFLOW = """import sys


class _Hiding:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        return None if name.partition(".")[0] == "tensorflow" else self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
"""


def env_hiding_tensorflow(folder: Path) -> dict[str, str]:
    """This process's environment with HIDING_TENSORFLOW's sitecustomize (written into `folder`) first on PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HIDING_TENSORFLOW)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
