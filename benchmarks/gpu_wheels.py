"""What benchmarks/gpu_wheels.sh carries: each distribution this project's `.[jax]` install needs
(pyproject.toml's dependencies and the `jax` extra, followed through the installed packages'
own metadata, for CPython 3.12 on x86-64 Linux), less those the GPU image has (the file named on
the command line), as name==version lines with this environment's versions.

With `--image-share`, the other side: the names of those the image has (a CPU dry run installs
them from the package index to stand in for the image).

Usage: python benchmarks/gpu_wheels.py benchmarks/gpu_image_packages.txt [--image-share]"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
THERE = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
         "platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def applies(requirement: Requirement, extras: set[str]) -> bool:
    marker = requirement.marker
    return marker is None or any(marker.evaluate({**THERE, "extra": extra}) for extra in {"", *extras})


def needed() -> dict[str, str]:
    """canonical name → installed version, of everything `.[jax]` needs, transitively."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["jax"]]]
    found: dict[str, str] = {}
    while todo:
        requirement = todo.pop()
        name = canonical(requirement.name)
        if name in found:
            continue
        found[name] = metadata.version(requirement.name)
        for line in metadata.requires(requirement.name) or []:
            inner = Requirement(line)
            if applies(inner, set(requirement.extras)):
                todo.append(inner)
    return found


def main(image_list: str, image_share: bool) -> None:
    image = {canonical(line.strip()) for line in Path(image_list).read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    for name, version in sorted(needed().items()):
        if (name in image) == image_share:
            print(name if image_share else f"{name}=={version}")


if __name__ == "__main__":
    main(sys.argv[1], "--image-share" in sys.argv[2:])
