"""The data's path from sample index to a uint8 batch: order, worker, ring (shared-memory slots), enqueuer,
prefetch, and pipeline (`Loader`, the one builder every command uses). Float32 starts in the model's first layer."""
