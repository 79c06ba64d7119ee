"""Patches of images larger than memory: where they lie, their regions read, the foreground mask."""
