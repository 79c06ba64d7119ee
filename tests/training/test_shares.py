"""Each process's share of the global batches (data_parallel): plain numpy."""

from __future__ import annotations

import numpy as np

from app.training.shares import mirrored_sizes, regrouped, train_share, validation_share


def test_the_shares_of_a_training_order_put_each_global_batch_back_together():
    order = np.random.default_rng(0).permutation(12)
    shares = [train_share(order, 4, 2, p) for p in range(2)]
    # JAX assembles each global batch from the processes' rows, in process order
    rebuilt = np.concatenate([np.concatenate([s[i * 2:(i + 1) * 2] for s in shares]) for i in range(3)])
    assert np.array_equal(rebuilt, order)
    assert not set(shares[0]) & set(shares[1])
    assert np.array_equal(train_share(order, 4, 1, 0), order)  # one process: the order as it is


def test_validation_shares_full_batches_and_loads_the_short_last_one_whole():
    first, second = (validation_share(5, 4, 2, p) for p in range(2))
    assert list(first.rows) == [0, 1, 4] and list(second.rows) == [2, 3, 4]
    assert first.sizes == second.sizes == [2, 1] and first.whole_last
    even = validation_share(8, 4, 2, 1)  # negative control: no short batch, nothing loaded twice
    assert list(even.rows) == [2, 3, 6, 7] and not even.whole_last and even.batches == 2


def test_regrouped_gathers_the_whole_last_batch_from_several_loader_batches():
    loader = [(np.full((2, 1, 1, 3), i, np.uint8), np.array([i, i])) for i in range(2)] + \
             [(np.full((1, 1, 1, 3), 2, np.uint8), np.array([2]))]
    out = list(regrouped(loader, [2, 3]))
    assert [len(y) for _, y in out] == [2, 3] and list(out[1][1]) == [1, 1, 2]


def test_mirrored_validation_gives_every_replica_a_row():
    assert mirrored_sizes(9, 4, 2) == [4, 5]  # 1 row for 2 replicas: with the batch before
    assert mirrored_sizes(19, 8, 4) == [8, 11]
    assert mirrored_sizes(11, 4, 2) == [4, 4, 3]  # negative control: 3 rows split 2 + 1
    assert mirrored_sizes(8, 4, 2) == [4, 4] and mirrored_sizes(3, 4, 2) == [3]
