"""Fair coins keyed by the completion: reward components that vary from the first step of a
random-init model, so a method that needs several components (GDPO normalises each apart) gets a
learning signal without minutes of warm start."""

import hashlib


def coin(*, completion, byte, **kwargs):
    return float(hashlib.sha256(completion.encode()).digest()[byte] % 2)
