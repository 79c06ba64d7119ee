"""A run's life: the trainer (validate, lock, data, model, the epoch loop, the record), the step
loop and its callbacks, checkpoints and where a resume starts, the run directory's files, and
resume itself. Uses the loader only through app/loader/pipeline.py and app/loader/order.py,
never its internals."""
