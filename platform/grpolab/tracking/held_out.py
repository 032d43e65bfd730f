"""The held-out evaluation as runs record it: its metric keys (one place: a new held-out key is
added here and in ``world.generation.EvalResult``) and a run's evals read at their ends."""

from __future__ import annotations

from dataclasses import dataclass

# The held-out metrics every evaluation logs, each from its ``world.generation.EvalResult`` field:
# the keys a study's final:/auc:/steps_to:/tokens_to:/start: metrics may read.
HELD_OUT_METRICS = {"eval/pass_at_1": "pass_at_1", "eval/pass_at_k": "pass_at_k",
                    "eval/greedy_accuracy": "greedy_accuracy", "eval/mean_length": "mean_length"}
EVAL_KEYS = tuple(HELD_OUT_METRICS)


class EvalSteps:
    """``evals`` ({step: {held-out key: value}}, step 0 the warm start) read at its ends; empty
    where this process holds no evaluation (ranks > 0)."""
    evals: dict

    @property
    def start_eval(self) -> dict:
        return self.evals[min(self.evals)] if self.evals else {}

    @property
    def final_eval(self) -> dict:
        return self.evals[max(self.evals)] if self.evals else {}


@dataclass
class RunHistory(EvalSteps):
    """A run's held-out evals and training curves ({key: [(step, value), ...]}): what a study row
    run on several processes hands to its worker (rank 0's, by file), and what analysis reads back
    from MLflow."""
    evals: dict
    train_curves: dict
