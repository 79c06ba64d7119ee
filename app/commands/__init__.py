"""One module a command word of `python -m app`, each with its own @hydra.main entry point."""
