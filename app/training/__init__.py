"""A run's training: the trainer, the epoch and step loops and their callbacks, the recipe and the devices."""
