"""app/loader/order.py: an epoch's permutation, or its draws with replacement (data.sampling), from
(seed, epoch) only."""

import numpy as np

from app.loader.order import class_balanced, draws_of, epoch_order, full_batches


def test_epoch_order_drops_the_remainder_and_reshuffles():
    a = full_batches(epoch_order(23, seed=0, epoch=0, shuffle=True), 4)
    b = full_batches(epoch_order(23, seed=0, epoch=1, shuffle=True), 4)
    assert len(a) == len(b) == 20 and len(set(a)) == 20
    assert list(a) != list(b)  # each epoch its own permutation, so dropped samples differ
    assert list(a) == list(full_batches(epoch_order(23, seed=0, epoch=0, shuffle=True), 4))
    assert list(epoch_order(23, seed=0, epoch=5, shuffle=False)) == list(range(23))


def test_balanced_draws_bring_a_9_to_1_split_within_5_percent_of_equal():
    labels = np.array([0] * 900 + [1] * 100)
    weights = class_balanced(labels)
    drawn = np.concatenate([epoch_order(1000, seed=0, epoch=e, shuffle=True, weights=weights) for e in range(3)])
    share = np.bincount(labels[drawn]) / len(drawn)
    assert len(drawn) == 3000 and abs(share[1] - 0.5) < 0.05, share
    again = epoch_order(1000, seed=0, epoch=1, shuffle=True, weights=weights)
    assert np.array_equal(again, drawn[1000:2000])  # (seed, epoch) only
    assert not np.array_equal(drawn[:1000], drawn[1000:2000])
    uniform = np.bincount(labels[epoch_order(1000, seed=0, epoch=0, shuffle=True)]) / 1000  # negative control
    assert uniform[1] == 0.1


def test_weights_draw_in_proportion_and_a_zero_never():
    weights = np.array([3.0, 1.0, 0.0, 0.0])
    drawn = np.concatenate([epoch_order(4, seed=1, epoch=e, shuffle=True, weights=weights) for e in range(500)])
    counts = np.bincount(drawn, minlength=4) / len(drawn)
    assert abs(counts[0] - 0.75) < 0.03 and counts[2] == counts[3] == 0


def test_each_draw_of_an_index_is_numbered_in_epoch_order():
    assert draws_of(np.array([4, 2, 4, 4, 2, 7])).tolist() == [0, 0, 1, 2, 1, 0]
    assert not draws_of(np.arange(6)).any()  # negative control: a permutation draws each once
