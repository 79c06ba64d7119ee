"""A run directory on disk: its folder, lock, summary, checkpoints, tables, data, sweeps and saved config."""
