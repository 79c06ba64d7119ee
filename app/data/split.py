"""What a split is: one contract every split class keeps, as grain's RandomAccessDataSource; callers never probe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from app.data.pixels.decode import Decode

Drawn = tuple[int, int, int]  # (seed, epoch, draw): where a random patch lies; any other split ignores it
Place = Callable[[int, int, int], str]  # (index, epoch, draw) → "image:x:y", a patch's place as samples.csv names it


@runtime_checkable
class Split(Protocol):
    """Samples 0..len-1 of a source, each read in two steps (fetch, then decode), cheap to pickle to workers."""

    labels: np.ndarray  # its targets: one int a sample, or (data.task=multilabel) a 0/1 uint8 row a sample
    bands: int | None  # its images' bands where it holds them (a prepared copy's manifest); None: counted off files
    patches: Any  # the data.patches its samples were cut by (PatchesConfig); None: whole images
    images: Any  # the images its patches were cut from (a FileSplit); None: whole images
    image_of: np.ndarray | None  # each patch's image, an index into `images`; None: whole images
    mask_dtype: str | None  # a sample is an (image, mask) pair, the mask of this type (segmentation); None: an image

    def __len__(self) -> int: ...

    # sample i's raw data (bytes, a TiffAt, pixels); BadSampleError where it cannot be read
    def fetch(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> Any: ...

    def decode(self, i: int, raw: Any, decode: Decode | None = None) -> np.ndarray: ...

    def read(self, i: int, decode: Decode | None = None, drawn: Drawn | None = None) -> np.ndarray: ...

    def describe(self, i: int, drawn: Drawn | None = None) -> str: ...  # where sample i is, as messages name it

    def take(self, picked: np.ndarray) -> Split: ...  # the samples `picked` (indices into it) as a split of their own

    def files(self) -> list[str]: ...  # the files it reads: [] for arrays and prepared copies

    def nodata(self, i: int) -> float | None: ...  # sample i's no-data value (a GeoTIFF's, a raw copy's); None: none

    # the most one decode holds under `decode`, by headers or an index: (its array's bytes, Pillow's copies' bytes)
    def largest_decode_bytes(self, decode: Decode) -> tuple[int, int]: ...

    def place_of(self, seed: int) -> Place | None: ...  # where each sample lies in its image; None: whole images


class WholeImages:  # a split of whole images' defaults: no patches, no place in an image, no file of its own, no mask
    bands = patches = images = image_of = mask_dtype = None

    def files(self) -> list[str]:
        return []

    def nodata(self, i: int) -> float | None:
        return None

    def place_of(self, seed: int) -> Place | None:
        return None
