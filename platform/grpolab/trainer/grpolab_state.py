"""GrpoLabTrainer's own training state beside the Trainer's checkpoint: one public pair over the
parts that keep state (each with its own ``state_dict()``), under names that stay stable, and
the reading of older state files, which hold trainer attributes by name (``from_flat_layout``).
"""

from __future__ import annotations

# what each stable name holds, in the order the state dict lists them
PARTS = {
    "counters": "generated tokens and accelerator seconds so far (step_times.RunCounters)",
    "entropy": "the entropy-bonus coefficient and the last step's entropy (entropy_control.EntropyController)",
    "prompt_draws": "the generator of dynamic sampling's extra rounds (sampling.PromptDraws)",
    "tracker": "SPO's per-prompt success tracker (algorithms.ValueTracker), None for other estimators",
    "critic": "the value model, its optimizer and micro-step count (critic.Critic), None without advantage=gae",
}


class GrpolabState:
    """A ``GrpoLabTrainer``'s stateful parts (its public attributes) under ``PARTS``' names."""

    def __init__(self, trainer):
        self.trainer = trainer

    def parts(self) -> dict:
        trainer = self.trainer
        return {"counters": trainer.counters, "entropy": trainer.entropy_control, "prompt_draws": trainer.prompt_draws,
                "tracker": trainer.tracker, "critic": trainer.critic}

    def state_dict(self) -> dict:
        """Every part's ``state_dict()`` by its name in ``PARTS`` (None for a part this run has not)."""
        return {name: None if part is None else part.state_dict() for name, part in self.parts().items()}

    def load_state_dict(self, state: dict) -> None:
        """Each part continues from its entry of ``state`` (a ``state_dict()``); ValueError when
        the state names other parts than this trainer has (a run of another method wrote it)."""
        parts = self.parts()
        if set(state) != set(parts):
            raise ValueError(f"grpolab state holds parts {sorted(state)}, this trainer keeps {sorted(parts)}")
        for name, part in parts.items():
            if (part is None) != (state[name] is None):
                has = "has none" if part is None else "has one"
                raise ValueError(f"grpolab state: the saved run {'had no' if state[name] is None else 'had a'} "
                                 f"{name}, this trainer {has} (method {self.trainer.method_name!r})")
        for name, part in parts.items():
            if part is not None:
                part.load_state_dict(state[name])


# the attributes the older layout saved by name (each only from the version that added it)
FLAT_KEYS = {"cumulative_tokens", "device_seconds", "entropy_coef_now", "_last_entropy", "_critic_micro_steps",
             "tracker", "_sampling_rng", "critic", "critic_opt"}


def from_flat_layout(flat: dict, current: dict) -> dict:
    """An older state file (trainer attributes by name, flat: ``cumulative_tokens``,
    ``entropy_coef_now``, ``_sampling_rng``, a pickled ValueTracker as ``tracker``, ``critic`` and
    ``critic_opt``, ...) as ``grpolab_state_dict()`` lays it out. A key the file lacks (written before
    that attribute was saved, e.g. ``device_seconds``) keeps the fresh trainer's value from
    ``current`` (its ``grpolab_state_dict()``), as the loader of that layout did."""
    unknown = set(flat) - FLAT_KEYS
    if unknown or "cumulative_tokens" not in flat:   # saved since the layout's first version
        raise ValueError(f"not a grpolab state file: keys {sorted(flat)[:6]}; an older one holds "
                         f"cumulative_tokens and some of {sorted(FLAT_KEYS - {'cumulative_tokens'})}")
    counters, entropy = current["counters"], current["entropy"]
    tracker = flat.get("tracker")
    critic = current["critic"]
    if flat.get("critic") is not None:
        critic = {"model": flat["critic"], "optimizer": flat["critic_opt"],
                  "micro_steps": flat.get("_critic_micro_steps", critic["micro_steps"] if critic else 0)}
    return {"counters": {**counters, "cumulative_tokens": flat.get("cumulative_tokens", counters["cumulative_tokens"]),
                         "device_seconds": flat.get("device_seconds", counters["device_seconds"])},
            "entropy": {"coef": flat.get("entropy_coef_now", entropy["coef"]),
                        "last_entropy": flat.get("_last_entropy", entropy["last_entropy"])},
            "prompt_draws": {"generator": flat.get("_sampling_rng")},
            "tracker": current["tracker"] if tracker is None else {"beta_params": dict(tracker.state)},
            "critic": critic}
