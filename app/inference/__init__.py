"""A saved run put to use by `evaluate`, `predict` and `export`: its model loaded, scored, exported."""
