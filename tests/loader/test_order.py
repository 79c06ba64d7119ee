"""app/loader/order.py: an epoch's permutation from (seed, epoch) only."""

from app.loader.order import epoch_order, full_batches


def test_epoch_order_drops_the_remainder_and_reshuffles():
    a = full_batches(epoch_order(23, seed=0, epoch=0, shuffle=True), 4)
    b = full_batches(epoch_order(23, seed=0, epoch=1, shuffle=True), 4)
    assert len(a) == len(b) == 20 and len(set(a)) == 20
    assert list(a) != list(b)  # each epoch its own permutation, so dropped samples differ
    assert list(a) == list(full_batches(epoch_order(23, seed=0, epoch=0, shuffle=True), 4))
    assert list(epoch_order(23, seed=0, epoch=5, shuffle=False)) == list(range(23))
