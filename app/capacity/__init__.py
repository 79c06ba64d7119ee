"""A run's use of this machine, planned and measured (memory, `auto` queue, diagnosis); training enters as callables."""
