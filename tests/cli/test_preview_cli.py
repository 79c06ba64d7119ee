"""`python -m app preview` for real: seeded pictures, the draft decode honoured, no TensorFlow. The
previews run in one process kept for the module (tests/docs_runner.py's OneProcess)."""

from __future__ import annotations

import os

import pytest
from docs_runner import OneProcess
from PIL import Image

DATA = ["data.num_images=24", "data.source_size=128", "data.num_classes=3", "data.image_size=[32,32]"]


@pytest.fixture(scope="module")
def previews(tmp_path_factory):
    root = tmp_path_factory.mktemp("preview")
    # TensorFlow and Keras made unimportable: the preview must not need them
    fake = root / "fake"
    for name in ("tensorflow", "keras"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("raise ImportError('no TensorFlow in preview')\n")
    app = OneProcess(env={**os.environ, "PYTHONPATH": str(fake)})

    def preview(name: str, *overrides: str) -> bytes:
        result = app("preview", *DATA, *overrides, f"hydra.run.dir={name}", cwd=root)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"written: {root / name / 'preview.png'}" in result.stdout
        return (root / name / "preview.png").read_bytes()

    with app:
        yield root, preview


@pytest.mark.slow
def test_the_same_seed_draws_the_same_picture(previews):
    root, preview = previews
    first = preview("a", "preview.images=3", "preview.augmentations=4")
    assert preview("b", "preview.images=3", "preview.augmentations=4") == first
    assert preview("c", "preview.images=3", "preview.augmentations=4", "seed=1") != first  # negative control
    cell = 96 + 4  # 32-pixel images drawn three times larger, a 4-pixel gap
    assert Image.open(root / "a" / "preview.png").size == (5 * cell, 3 * (96 + 14 + 4))


@pytest.mark.slow
def test_the_draft_decode_shows(previews):
    _, preview = previews
    assert preview("draft", "preview.images=2") != preview("full", "preview.images=2", "data.decode.draft=false")
