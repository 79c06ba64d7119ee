"""Train image classifiers on large images without running out of host memory.

Set before anything imports albumentations: it otherwise checks for updates over the
network on every import, in every worker process.
TensorFlow's C++ INFO/WARNING lines (oneDNN, CUDA stubs) drown the progress bar; errors stay.
Imports nothing of the app, nor TensorFlow: every process, workers included, runs it.
"""

import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
