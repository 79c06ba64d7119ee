"""The bench command's modes, each run in a child process of its own (app/bench/modes.py), and
the hand-written keras.utils.PyDataset it is compared with (app/bench/keras_baseline.py).
Imported by the bench command only; never by the loader or training."""
