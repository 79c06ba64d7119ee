"""The bench command's modes, each run in a child process of its own, and the baselines the loader is compared with."""
