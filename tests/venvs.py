"""Virtual environments of this one's packages less some, for the tests of what an install without an extra does."""

from __future__ import annotations

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
