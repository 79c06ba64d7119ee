"""One module a command word of `python -m app`, each with its own @hydra.main entry point.
Nothing here is imported by the loader, the model or training."""
