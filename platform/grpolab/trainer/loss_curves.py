"""``LossCurves``: a ``GrpoLabTrainer``'s loss-side curves, the windows of ``loss_stats`` kept over
its micro-batches and logged through its ``record_curve``."""

from __future__ import annotations

import math

import torch

from grpolab.trainer.loss_stats import WindowStats, combine_over_processes, weighted


class LossCurves:
    """A ``GrpoLabTrainer``'s loss-side curves, logged through its ``record_curve``: TRL's own per
    micro-batch, grpolab's over each generation batch (``window``), and the trained-token entropy
    of each optimizer step (``step_entropy``), which the adaptive entropy coefficient reads."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.window, self.step_entropy = WindowStats(), WindowStats()

    def _reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        accelerator = self.trainer.accelerator
        return accelerator.reduce(t.to(accelerator.device), reduction="sum").cpu()

    def log_trl(self, stats: dict, mode: str, tokens: float) -> None:
        """TRL's own loss-side curves (``metric_catalog.trl_loss_keys``, ``aux_loss``) under TRL's names,
        once per micro-batch as TRL logs them (its ``log`` averages over the logging window), combined
        over processes as TRL combines them (``combine_over_processes``). The MLflow recorder of CLI
        runs drops the ones that duplicate grpolab's curves."""
        if not stats:
            return
        accelerator = self.trainer.accelerator
        if accelerator.num_processes > 1:
            stats = combine_over_processes(stats, tokens, accelerator)
        for key in sorted(stats):
            self.trainer.record_curve(key, float(stats[key]), mode)

    def log_eval(self, stats: dict) -> None:
        """An evaluation micro-batch's statistics, each as it came (NaN: no data, left out)."""
        for key, value in stats.items():
            if not (isinstance(value, float) and math.isnan(value)):
                self.trainer.record_curve(key, value, "eval")

    def accumulate(self, stats: dict, tokens: float) -> float | None:
        """One training micro-batch's loss-side curves into the generation batch's window (all its
        passes, fresh and reused; ``log_window`` logs it) and its trained-token entropy into the
        optimizer step's. At an accumulation boundary (``sync_gradients``) the step's entropy over
        every process (None: no trained token), which the adaptive entropy coefficient reads; None
        between boundaries."""
        processes = self.trainer.accelerator.num_processes
        stats = {k: v for k, v in stats.items() if not (k in ("entropy", "trained/entropy") and math.isnan(v))}
        pairs = weighted(stats, tokens, processes)
        self.window.add(pairs)
        if "trained/entropy" in pairs:
            self.step_entropy.add({"trained/entropy": pairs["trained/entropy"]})
        if not self.trainer.accelerator.sync_gradients:
            return None
        return self.step_entropy.emit(self._reduce_sum if processes > 1 else None).get("trained/entropy")

    def log_window(self) -> None:
        """The generation batch's loss-side curves, reduced over its micro-batches and every process
        (every process calls it at the same micro-step)."""
        processes = self.trainer.accelerator.num_processes
        for key, value in self.window.emit(self._reduce_sum if processes > 1 else None).items():
            self.trainer.record_curve(key, value)
