"""shoal: a training-cluster manager for ML and RL teams."""

__version__ = "0.1.0"
