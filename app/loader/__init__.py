"""The data's path from sample index to float32 batch: ring (shared-memory slots), worker
(read → decode → augment, no TensorFlow), enqueuer (order, epochs, faults), boundary
(uint8 → float32)."""
