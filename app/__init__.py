"""Train image classifiers on large images without running out of host memory. Every process, workers included, runs
this, so it imports nothing of the app nor TensorFlow; it stops albumentations' update check (a network call on every
import, in every worker) and TensorFlow's C++ INFO/WARNING lines (they drown the progress bar; errors stay)."""

import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
