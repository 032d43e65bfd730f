"""Where a rollout's wall time goes: the ``time/*`` curves, measured around TRL's own phases.

One window is one generation batch (the training steps that share a rollout, all its reuse
passes). Its seconds are split three ways:

- generation: TRL's ``_generate`` (sampling and decoding, every dynamic-sampling round);
- scoring: TRL's ``_calculate_rewards`` (the reward functions, ReMax's greedy scoring too);
- update: the rest of the window's ``training_step`` calls (log-probs, advantages, forward,
  backward, optimizer), update = sum(training_step) - generation - scoring.

Detail: docs/runs.md, "grpolab.trainer.step_times".
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass

import torch


@dataclass
class RunCounters:
    """The run's totals so far, a resumed run's earlier part included."""
    cumulative_tokens: float = 0.0   # generated completion tokens
    device_seconds: float = 0.0      # processes x wall seconds of training
    empty_streak: int = 0            # update batches in a row that gave the policy no gradient (max_empty_updates)

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        self.cumulative_tokens, self.device_seconds = float(state["cumulative_tokens"]), float(state["device_seconds"])
        # a state saved before the streak was kept resumes it from 0, as those runs did
        self.empty_streak = int(state.get("empty_streak", 0))


class StepTimes:
    """Times generation, scoring and the update of each training window of a trainer and gives
    the window's curves, with the run's measured accelerator time so far (``counters``, the
    trainer's ``RunCounters``). The trainer's overrides of TRL's phases call it."""

    def __init__(self, counters: RunCounters):
        self.counters = counters
        self.seconds = {"generation": 0.0, "scoring": 0.0, "window": 0.0}
        self.tokens_at_window_start = 0.0
        self.clock: float | None = None   # the end of the last window (the first training step's start before it)

    @contextlib.contextmanager
    def measure(self, phase: str, training: bool):
        """Adds the wall time of the block to ``phase`` ("generation" or "scoring") while training."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if training:
                self.seconds[phase] += time.perf_counter() - start

    def step_starts(self) -> float:
        """The start of one ``training_step``."""
        start = time.perf_counter()
        if self.clock is None:   # training starts (or resumes: the counters restored from the checkpoint)
            self.clock, self.tokens_at_window_start = start, self.counters.cumulative_tokens
        return start

    def step_ends(self, start: float, window_ends: bool, accelerator) -> dict:
        """After one ``training_step`` begun at ``start``: the window's curves where it ends (TRL
        counted its last micro-step), else {}."""
        device = accelerator.device
        if window_ends and device.type == "cuda":   # a rank on the CPU (gloo fallback) has no kernels queued
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        self.seconds["window"] += now - start
        return self._window_curves(now, accelerator.num_processes) if window_ends else {}

    def _window_curves(self, now: float, processes: int) -> dict:
        """The window's curves. ``time/accelerator_hours`` counts wall time between windows too
        (held-out evaluations, checkpoints): processes x seconds since training started / 3600."""
        counters, seconds = self.counters, self.seconds
        counters.device_seconds += (now - self.clock) * processes
        self.clock = now
        curves = {"time/generation_s": seconds["generation"], "time/scoring_s": seconds["scoring"],
                  "time/update_s": seconds["window"] - seconds["generation"] - seconds["scoring"],
                  "time/accelerator_hours": counters.device_seconds / 3600}
        if seconds["generation"] > 0:
            tokens = counters.cumulative_tokens - self.tokens_at_window_start
            curves["time/generated_tokens_per_s"] = tokens / seconds["generation"]
        self.tokens_at_window_start = counters.cumulative_tokens
        self.seconds = dict.fromkeys(seconds, 0.0)
        return curves
