"""Learning-rate schedules, one a `scheduler=<option>`, over the optimizer's update counter that checkpoints keep."""

from __future__ import annotations

from collections.abc import Callable

import keras

Updates = Callable[[float], int]


def constant(s, *, peak: float, updates: Updates, epochs: int):
    return peak


def cosine(s, *, peak: float, updates: Updates, epochs: int):
    """A linear warm-up from 0 over `warmup_epochs`, then cosine decay to `final_fraction` of the peak."""
    return _warm_then_cosine(start=0.0, peak=peak, warmup=updates(s.warmup_epochs), total=updates(epochs),
                             final_fraction=s.final_fraction)


def one_cycle(s, *, peak: float, updates: Updates, epochs: int):
    """Linear from `start_fraction` of the peak up to it at `peak_at` of the run, then cosine down."""
    total = updates(epochs)
    return _warm_then_cosine(start=s.start_fraction * peak, peak=peak, warmup=round(s.peak_at * total), total=total,
                             final_fraction=s.final_fraction)


def step(s, *, peak: float, updates: Updates, epochs: int):
    """The peak times `gamma` every `every_epochs` epochs."""
    return _piecewise(range(s.every_epochs, epochs, s.every_epochs), s.gamma, peak, updates)


def multistep(s, *, peak: float, updates: Updates, epochs: int):
    """The peak times `gamma` after each epoch in `milestones`."""
    return _piecewise(s.milestones, s.gamma, peak, updates)


def _warm_then_cosine(*, start: float, peak: float, warmup: int, total: int, final_fraction: float):
    return keras.optimizers.schedules.CosineDecay(start, max(total - warmup, 1), alpha=final_fraction,
                                                  warmup_target=peak, warmup_steps=warmup)


def _piecewise(epochs, gamma: float, peak: float, updates: Updates):
    # Keras changes the value once the counter passes a boundary: the first update of epoch e + 1
    # runs at counter updates(e)
    boundaries = [updates(epoch) - 1 for epoch in epochs]
    if not boundaries:
        return peak
    return keras.optimizers.schedules.PiecewiseConstantDecay(boundaries,
                                                             [peak * gamma**i for i in range(len(boundaries) + 1)])
