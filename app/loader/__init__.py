"""Sample index → uint8 batch: order, worker, ring, enqueuer, prefetch, pipeline (`Loader`, every command's builder)."""
