"""bench's hand-written patch reader (keras_regions): on each patch the loader reads, the same pixels as the app's
region reader, from an SVS through OpenSlide and a TIFF through tifffile, as float32 batches with the labels."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from slides import slide_pixels, write_slide, write_svs

from app.bench.keras_baseline import HandRegions
from app.data.slides.patches import patched
from app.data.source import FileSplit, Source
from app.model import normalise

SEED = 5


def patches_of(path) -> object:
    settings = SimpleNamespace(size=[48, 48], level=None, downsample=None, mpp=0.75, stride=None, per_image=6,
                               mode=SimpleNamespace(value="random"), min_foreground=0.5, mask_bands=None,
                               max_chunk_pixels=16_777_216, chunk_cache_mib=64, reader=SimpleNamespace(value="auto"))
    source = Source(name="folder", class_names=["a", "b"], train=FileSplit([str(path)], [1]),
                    val=FileSplit([str(path)], [1]), fingerprint="f", split={})
    return patched(source, settings).train


@pytest.mark.parametrize("kind", ["svs", "tif"])
def test_the_hand_reader_reads_the_loaders_patches(kind, tmp_path):
    image, _ = slide_pixels(768, 1, np.random.default_rng(2))
    path = tmp_path / f"slide.{kind}"
    (write_svs if kind == "svs" else write_slide)(path, image, levels=3, tile=128, mpp=0.25)
    split = patches_of(path)
    assert split.layouts[0].slide.openslide == (kind == "svs") and split.layouts[0].read != split.size  # shrunk
    batches = np.array([[(0, i) for i in range(3)], [(1, i) for i in range(3, 6)]])
    places = {}
    for epoch, index in batches.reshape(-1, 2):
        layout, (y, x) = split.region_of(int(index), (SEED, int(epoch), 0))
        places[int(epoch), int(index)] = (layout.slide.path, layout.level, (x, y), layout.read, layout.slide.openslide)
    hand = HandRegions(split, lambda image, seed, epoch, index: image, (batches, places), SEED)
    x, y = hand[1]
    wanted = np.stack([split.read(i, None, (SEED, 1, 0)) for i in range(3, 6)])
    np.testing.assert_allclose(x, normalise(wanted), atol=1e-6)
    assert x.dtype == np.float32 and list(y) == [1, 1, 1]
    assert not np.allclose(hand[0][0], x)  # negative control: another epoch's patches
