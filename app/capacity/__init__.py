"""Capacity: what a run will take of this machine and what it did take: memory measured and planned, the `auto`
queue values, and the diagnosis at an epoch's end. What it needs of training comes in as callables."""
