"""The data: `pixels/` (decode), `split.py` and `source.py` (the split contract, whole-image splits),
`slides/` and `copies/` (patches, prepared copies), `sources/` (each data=option); the floors: docs/architecture.md."""
