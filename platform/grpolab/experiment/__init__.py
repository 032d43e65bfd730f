"""One experiment run: its validated configuration, the engines it runs on (precision, LoRA,
vLLM, devices), pretrained models, checkpoints, the run itself in named phases, held-out vLLM
evaluation and live progress."""
