"""Capacity: what a run will take of this machine and what it did take. The process tree's
memory as a run measures it (memory.py), this machine's figures measured once (probe.py), the
memory plan of a config and its fixes (plan.py), `queue.workers=auto` and `queue.max_size=auto`
(auto.py), the run's queue held to the memory limit before any worker starts (queue_plan.py), and the
one-line diagnosis at an epoch's end (diagnosis.py).

It works on plain facts: sizes, the model's figures (app/model.py: memory_facts), measured
times. What it needs of training (a tiny training job for the probe, the compiled step timed
for `auto`) comes in as callables from app/training/calibration.py. Never imports app.training,
app.commands, TensorFlow, Keras or JAX.
"""
