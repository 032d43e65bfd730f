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
    """A GRPOTrainer mixin: times generation, scoring and the update of each training window and
    appends them to the window's curves, with the run's measured accelerator time so far
    (``self.counters``, a ``RunCounters``)."""

    _generation_s = _scoring_s = _window_s = 0.0
    _tokens_at_window_start = 0.0
    _clock: float | None = None   # the end of the last window (the first training step's start before it)

    def _generate(self, prompts):
        if not self.model.training:
            return super()._generate(prompts)
        start = time.perf_counter()
        try:
            return super()._generate(prompts)
        finally:
            self._generation_s += time.perf_counter() - start

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if not self.model.training:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        start = time.perf_counter()
        try:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:
            self._scoring_s += time.perf_counter() - start

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        if self._clock is None:   # training starts (or resumes: the counters restored from the checkpoint)
            self._clock, self._tokens_at_window_start = start, self.counters.cumulative_tokens
        output = super().training_step(model, inputs, num_items_in_batch)
        window_ends = self._step % (self.args.steps_per_generation * self.num_iterations) == 0   # TRL counted it
        device = self.accelerator.device
        if window_ends and device.type == "cuda":   # a rank on the CPU (gloo fallback) has no kernels queued
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        self._window_s += now - start
        if window_ends:
            self._emit_window(now)
        return output

    def _emit_window(self, now: float) -> None:
        """The window's curves. ``time/accelerator_hours`` counts wall time between windows too
        (held-out evaluations, checkpoints): processes x seconds since training started / 3600."""
        counters = self.counters
        counters.device_seconds += (now - self._clock) * self.accelerator.num_processes
        self._clock = now
        curves = {"time/generation_s": self._generation_s, "time/scoring_s": self._scoring_s,
                  "time/update_s": self._window_s - self._generation_s - self._scoring_s,
                  "time/accelerator_hours": counters.device_seconds / 3600}
        if self._generation_s > 0:
            tokens = counters.cumulative_tokens - self._tokens_at_window_start
            curves["time/generated_tokens_per_s"] = tokens / self._generation_s
        for key, value in curves.items():
            self._metrics["train"][key].append(value)
        self._tokens_at_window_start = counters.cumulative_tokens
        self._generation_s = self._scoring_s = self._window_s = 0.0
