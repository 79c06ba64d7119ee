"""app/loader/order.py: an epoch's permutation from (seed, epoch) only."""

from app.loader.order import epoch_order


def test_epoch_order_drops_the_remainder_and_reshuffles():
    a = epoch_order(23, 4, seed=0, epoch=0, shuffle=True, drop_last=True)
    b = epoch_order(23, 4, seed=0, epoch=1, shuffle=True, drop_last=True)
    assert len(a) == len(b) == 20 and len(set(a)) == 20
    assert list(a) != list(b)  # each epoch its own permutation, so dropped samples differ
    assert list(a) == list(epoch_order(23, 4, seed=0, epoch=0, shuffle=True, drop_last=True))
    assert list(epoch_order(23, 4, seed=0, epoch=5, shuffle=False, drop_last=False)) == list(range(23))
