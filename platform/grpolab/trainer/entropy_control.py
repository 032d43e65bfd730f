"""The adaptive entropy-bonus coefficient, one object with ``update()`` as verl's KL controllers
are. No TRL here; the trainer mirrors its state into TRL's attributes for TRL's checkpoint and
keeps it in grpolab's own through ``state_dict()``.
"""

from __future__ import annotations

import math

from grpolab.method.entropy_modes import ENTROPY_MODES


class EntropyController:
    """The entropy-bonus coefficient of a method's ``entropy_mode``.

    ``static``: ``entropy_coef`` throughout. ``adaptive``: once per optimizer step, from the
    entropy H of that step's trained tokens over every process, coef <- min(coef + step, max)
    while H < target, else coef <- max(coef - step, min). ``adaptive_gated`` (TRL's controller,
    Skywork-OR1): the same with H <= target, and the bonus applied only while the previous
    step's H was <= target (none before the first step)."""

    def __init__(self, spec):
        self.spec = spec
        self.mode = ENTROPY_MODES[spec.entropy_mode]   # its facts: method/entropy_modes.py
        self.coef = spec.entropy_coef
        self.last_entropy = math.inf   # the last optimizer step's entropy (none yet: no gated bonus)

    def applied(self) -> float:
        """The coefficient this micro-batch's loss uses."""
        if self.mode.gated and not self.last_entropy <= self.spec.entropy_target:
            return 0.0
        return self.coef

    def update(self, entropy: float | None) -> bool:
        """Move the coefficient from one optimizer step's entropy; whether it moved."""
        spec = self.spec
        if not self.mode.adaptive or entropy is None:
            return False
        below = entropy <= spec.entropy_target if self.mode.gated else entropy < spec.entropy_target
        if below:
            self.coef = min(self.coef + spec.entropy_coef_step, spec.entropy_coef_max)
        else:
            self.coef = max(self.coef - spec.entropy_coef_step, spec.entropy_coef_min)
        self.last_entropy = entropy
        return True

    def state_dict(self) -> dict:
        return {"coef": self.coef, "last_entropy": self.last_entropy}

    def load_state_dict(self, state: dict) -> None:
        self.coef, self.last_entropy = float(state["coef"]), float(state["last_entropy"])
