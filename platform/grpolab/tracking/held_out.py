"""The held-out evaluation as runs record it: its metric keys (one place: a new held-out key is
added here and in ``world.generation.EvalResult``) and a run's evals read at their ends."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grpolab.tracking.naming import clean_metric_name

# The held-out metrics every evaluation logs, each from its ``world.generation.EvalResult`` field:
# the keys a study's final:/auc:/steps_to:/tokens_to:/start: metrics may read.
HELD_OUT_METRICS = {"eval/pass_at_1": "pass_at_1", "eval/pass_at_k": "pass_at_k",
                    "eval/greedy_accuracy": "greedy_accuracy", "eval/mean_length": "mean_length"}
EVAL_KEYS = tuple(HELD_OUT_METRICS)
# The final evaluation's pass@1 on the curve's prompts only (the first eval.prompts of its
# eval.final_prompts): what an earlier evaluation is compared with on the same prompts. Not a
# held-out key of objectives (no curve: the final step only); not eval/<name>/..., a benchmark's shape.
CURVE_SET_KEY = "eval/pass_at_1_curve_prompts"


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


# A named benchmark's scores (tasks/benchmarks.py): eval/<benchmark>/<score>, as MLflow stores them.
BENCHMARK_KEY = re.compile(r"^eval/[A-Za-z0-9][A-Za-z0-9_.-]*/(?:(?:avg|pass|maj|sd)_at_[1-9][0-9]*|mean_length)$")


def canonical_metric(metric: str) -> str:
    """A metric (or study objective) under the one name runs store it by: ``avg@32`` is written
    ``avg_at_32`` (MLflow refuses '@'), so ``final:eval/aime24/avg@32`` reads ``.../avg_at_32``."""
    return clean_metric_name(metric)


def is_eval_key(key: str) -> bool:
    """A key of the evaluations a run records: the held-out set's, or a named benchmark's."""
    return key in EVAL_KEYS or BENCHMARK_KEY.match(key) is not None
