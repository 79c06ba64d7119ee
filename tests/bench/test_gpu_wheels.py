"""benchmarks/gpu_wheels.py: what the GPU image lacks of a `.[jax]` install, read from this
environment's metadata (no package index): the carried side and the image's side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_wheels.py"
IMAGE = ROOT / "benchmarks" / "gpu_image_packages.txt"


def listed(image: Path, *flags: str) -> list[str]:
    run = subprocess.run([sys.executable, str(SCRIPT), str(image), *flags], capture_output=True, text=True,
                         check=True)
    return run.stdout.split()


def test_the_wheels_carried_are_what_a_jax_install_needs_and_the_image_lacks(tmp_path):
    carried = {line.split("==")[0] for line in listed(IMAGE)}
    assert {"keras", "hydra-core", "omegaconf", "antlr4-python3-runtime", "albumentations", "albucore",
            "pydantic", "pydantic-core"} <= carried
    assert not carried & {"numpy", "jax", "jaxlib", "pillow", "tensorboard", "tensorflow", "app"}
    share = set(listed(IMAGE, "--image-share"))
    assert {"jax", "numpy", "pillow", "opencv-python-headless", "tensorboard"} <= share
    assert not share & carried and "tensorflow" not in share  # .[jax] needs no TensorFlow at all
    empty = tmp_path / "nothing.txt"  # the control: an image with nothing carries numpy and JAX too
    empty.write_text("# no packages\n")
    assert {"numpy", "jax"} <= {line.split("==")[0] for line in listed(empty)}
