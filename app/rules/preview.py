"""The preview group's rules (app/schema/__init__.py: PreviewConfig, `python -m app preview` only)."""

from __future__ import annotations

from app.rules.common import require


def check(preview) -> None:
    require(preview.images >= 1, "preview.images", preview.images, "at least 1 sample")
    require(preview.augmentations >= 1, "preview.augmentations", preview.augmentations, "at least 1")
