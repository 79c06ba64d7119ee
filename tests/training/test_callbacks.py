"""What a checkpoint keeps of the user's callbacks (CallbackStates), on Keras's own callbacks."""

from __future__ import annotations

import keras
import numpy as np

from app.training import callbacks
from app.training.callbacks import CallbackStates


def started(*callbacks, saved=None, arrays=None) -> CallbackStates:
    for callback in callbacks:
        callback.on_train_begin()
    states = CallbackStates(list(callbacks))
    states.started(saved, arrays or {})
    return states


def test_counters_and_best_weights_come_back_and_constructor_arguments_do_not():
    plateau = keras.callbacks.ReduceLROnPlateau(patience=5)
    stopping = keras.callbacks.EarlyStopping(patience=4, restore_best_weights=True)
    states = started(plateau, stopping)
    plateau.wait, plateau.cooldown_counter, plateau.best = 3, 1, 0.25
    stopping.wait, stopping.best, stopping.best_weights = 2, 0.5, [np.ones((2, 2)), np.zeros(3)]
    plain, arrays = states.changed()
    assert plain == [{"wait": 3, "cooldown_counter": 1, "best": 0.25}, {"wait": 2, "best": 0.5}]
    # the resumed run's own config: new patience values, which the saved state must not undo
    plateau2, stopping2 = keras.callbacks.ReduceLROnPlateau(patience=7), keras.callbacks.EarlyStopping(patience=9)
    started(plateau2, stopping2, saved=plain, arrays=arrays)
    assert (plateau2.wait, plateau2.cooldown_counter, plateau2.best, plateau2.patience) == (3, 1, 0.25, 7)
    assert (stopping2.wait, stopping2.best, stopping2.patience) == (2, 0.5, 9)
    assert [a.tolist() for a in stopping2.best_weights] == [[[1, 1], [1, 1]], [0, 0, 0]]
    # negative control: without the saved state, on_train_begin's fresh counters
    plateau3 = keras.callbacks.ReduceLROnPlateau(patience=7)
    started(plateau3)
    assert plateau3.wait == 0 and plateau3.cooldown_counter == 0


def test_nothing_changed_nothing_saved():
    states = started(keras.callbacks.EarlyStopping(), keras.callbacks.TerminateOnNaN())
    assert states.changed() == ([{}, {}], {})


def test_a_long_validation_shows_a_bar_and_a_short_one_none(capsys, monkeypatch):
    bar = callbacks.Progress(epochs=1, steps=4)
    for delay, shown in ((60, False), (0, True)):  # a pass shorter than the delay (negative control), a slow one
        monkeypatch.setattr(callbacks, "VALIDATION_BAR_AFTER_S", delay)
        bar.on_test_begin()
        for batch in range(250):
            bar.on_test_batch_end(batch)
        bar.on_test_end()
        assert ("validation" in capsys.readouterr().err) == shown
