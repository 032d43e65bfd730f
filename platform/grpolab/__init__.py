"""grpolab: an experiment-tracking ablation platform for the GRPO family of RL algorithms."""

__version__ = "0.1.0"
