"""The data's path from sample index to a uint8 batch out of the ring: order (which samples an
epoch visits), worker (read → decode → augment, in a process of its own), ring (shared-memory
slots), enqueuer (scheduling, faults, the bad-sample policy), prefetch (the next batch copied
out while one trains), pipeline (the one builder every command uses, and `Loader`: all a command
holds of it). Imports only its own floor and below (data, augment, errors, config; see
docs/architecture.md), never the model, the backbones, capacity, training, the commands, or
TensorFlow, Keras or JAX: the uint8 → float32 boundary is the model's first layer (app/model.py)."""
