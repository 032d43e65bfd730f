"""A verifiable task built from parts: source + prompting + extraction + grading + rewards.

It is a ``Task`` (world/task.py: ``splits``, ``target``, ``score``, ``is_correct``,
``reward_names``, ``max_completion_length``), so the trainer, the warm start and the held-out
evaluation treat every kind alike, plus ``render`` (prompting with the model's tokenizer) and
``reward_funcs`` (one TRL reward function per named reward, with failure accounting).
"""

from __future__ import annotations

import logging
import random
from typing import Callable, NamedTuple

from grpolab.errors import ConfigError
from grpolab.tasks.prompting import Prompting
from grpolab.tasks.rewards import Reward, RewardFailedError, call_user
from grpolab.world.task import Draws, Example, Task

log = logging.getLogger(__name__)
_CACHE_LIMIT = 8192


class Grading(NamedTuple):
    """How a completion is judged: ``extract`` reads its answer (None: no answer), then ``grader``
    compares it with the reference, or, with ``kind`` task, the source's own scorer does."""
    extract: Callable[[str], str | None]
    kind: str          # task.grade: math, numeric, exact or task
    grader: Callable[[str, str], bool]


class VerifiedTask(Task):
    def __init__(self, name: str, params: dict, source, prompting: Prompting, grading: Grading,
                 rewards: list[Reward], max_completion_length: int):
        if grading.kind == "task" and not hasattr(source, "scorer"):
            raise ConfigError("task.grade: task (the source's own scorer) is only valid for reasoning_gym; "
                              "use math, numeric or exact")
        self.name, self.params, self.source, self.prompting = name, params, source, prompting
        self.extract, self.grade_kind, self.grader = grading
        self.rewards = rewards
        self.max_completion_length = max_completion_length
        self.reward_names = tuple(r.label for r in rewards)
        self.reward_weights = tuple(r.weight for r in rewards)
        self._graded: dict[tuple[str, str], bool] = {}

    # -- the Task interface (world/task.py) ----------------------------------------------
    def draws(self, seed: int, n_train: int, n_eval: int, held_out_seed) -> Draws:
        return self.source.draws(seed, n_train, n_eval)

    def target(self, example: Example, rng: random.Random) -> str:
        return example.answer   # the SFT target of a warm start: the bare reference

    def is_correct(self, example: Example, completion: str) -> bool:
        """Extract, then grade; memoised because the reward and the curves both ask."""
        key = (example.prompt, completion)
        if key not in self._graded:
            if len(self._graded) > _CACHE_LIMIT:
                self._graded.clear()
            extracted = self.extract(completion)
            self._graded[key] = extracted is not None and self.grade(example, extracted)
        return self._graded[key]

    def grade(self, example: Example, extracted: str) -> bool:
        if self.grade_kind == "task":
            return self.source.score(example, extracted) >= 1.0
        return self.grader(example.answer, extracted)

    def score(self, example: Example, completion: str, completion_length: int | None = None,
              max_len: int | None = None) -> dict[str, float]:
        """Every reward of one completion; a failing reward scores its ``on_error`` value.
        ``completion_length`` (tokens) defaults to the character count when unknown."""
        length = len(completion) if completion_length is None else completion_length
        out = {}
        for reward in self.rewards:
            try:
                out[reward.label] = self.reward_value(reward, example, completion, length, max_len)
            except Exception:  # noqa: BLE001 - documented: a failing reward scores on_error
                out[reward.label] = reward.on_error
        return out

    # -- rewards -------------------------------------------------------------------------
    def reward_value(self, reward: Reward, example: Example, completion: str, length: int,
                     max_len: int | None) -> float:
        if reward.name == "correctness":
            return float(self.is_correct(example, completion))
        if reward.name == "format":
            return float(self.extract(completion) is not None)
        if reward.name == "length":
            return soft_overlong(length, max_len or self.max_completion_length, **reward.params)
        arguments = {"prompt": example.meta.get("question", example.prompt), "completion": completion,
                     "answer": example.answer, "extracted": self.extract(completion), "meta": example.meta,
                     "completion_length": length}
        return call_user(reward, arguments)

    def reward_funcs(self, examples: list[Example], max_len: int) -> list:
        """TRL reward functions (one per reward, named by its label), rows looked up by ``idx``."""
        return [self._reward_function(reward, examples, max_len) for reward in self.rewards]

    def _reward_function(self, reward: Reward, examples: list[Example], max_len: int):
        def reward_function(prompts, completions, completion_ids, idx, log_metric=None, **kwargs):
            values, failed, last_error = [], 0, None
            for i, completion, ids in zip(idx, completions, completion_ids):
                try:
                    values.append(self.reward_value(reward, examples[i], completion, len(ids), max_len))
                except Exception as exc:  # noqa: BLE001 - counted, logged and scored on_error (documented)
                    failed, last_error = failed + 1, exc
                    values.append(reward.on_error)
            reward.calls, reward.failures = reward.calls + len(values), reward.failures + failed
            if log_metric is not None:
                log_metric(f"rewards/{reward.label}/failure_rate", failed / max(len(values), 1))
            if failed:
                log.warning("reward %s failed on %d of %d completions (scored %s): %s: %s", reward.label, failed,
                            len(values), reward.on_error, type(last_error).__name__, last_error)
            total_failed, total = _sum_over_processes(failed, len(values))
            if total and total_failed == total:
                raise RewardFailedError(f"reward {reward.label!r} failed on every completion of a rollout ({total}); "
                                        f"last error: {type(last_error).__name__}: {last_error}")
            return values
        reward_function.__name__ = reward.label
        reward_function.reward = reward   # its run counters: the trainer restores them around scoring that is not a rollout's
        return reward_function

    # -- prompting -----------------------------------------------------------------------
    def render(self, examples: list[Example], tokenizer) -> list[Example]:
        """Examples whose prompt is the model's input text; the question moves to meta."""
        return [Example(self.prompting.render(e.prompt, tokenizer), e.answer, {**e.meta, "question": e.prompt})
                for e in examples]


def eval_sample_rows(task, samples: list[dict], examples: list[Example], step: int) -> list[dict]:
    """Rows of the eval sample table (MLflow ``log_table``): question, completion, extracted
    answer, reference, correctness and every reward component, for eval samples that carry their
    example's ``index`` (and token ``length``). Works for toy tasks too (extracted = stripped text)."""
    rows = []
    for sample in samples:
        example, completion = examples[sample["index"]], sample["completion"]
        if isinstance(task, VerifiedTask):
            extracted, scores = task.extract(completion), task.score(example, completion, sample.get("length"))
        else:
            extracted, scores = completion.strip(), task.score(example, completion)
        rows.append({"step": step, "question": example.meta.get("question", example.prompt), "completion": completion,
                     "extracted": extracted, "answer": example.answer, "correct": bool(task.is_correct(example, completion)),
                     **{f"reward/{label}": float(value) for label, value in scores.items()}})
    return rows


def log_eval_samples(recorder, task, samples: list[dict], examples: list[Example], step: int) -> None:
    """Append one evaluation's sample rows to the run's MLflow table ``eval_samples.json``
    (``MlflowClient.log_table`` appends to an existing table file; the ``step`` column tells evals apart)."""
    import pandas as pd
    rows = eval_sample_rows(task, samples, examples, step)
    if rows:
        recorder.client.log_table(recorder.run_id, data=pd.DataFrame(rows), artifact_file="eval_samples.json")


def soft_overlong(length: int, max_len: int, buffer: int | None = None, penalty: float = 1.0) -> float:
    """DAPO soft overlong punishment: 0 up to L_max - B, linear to -penalty at L_max, -penalty beyond."""
    import torch  # lazy here and below: validating a config (a study's coordinator) needs no torch

    from grpolab.algorithms import soft_overlong_penalty
    buffer = buffer or max(1, round(0.2 * max_len))
    return float(soft_overlong_penalty(torch.tensor([length], device="cpu"), max_len, buffer, penalty)[0])


def _sum_over_processes(failed: int, total: int) -> tuple[int, int]:
    """Failure counts summed over processes, so every rank takes the same stop decision."""
    import torch
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        device = "cuda" if torch.distributed.get_backend() == "nccl" else "cpu"
        counts = torch.tensor([failed, total], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(counts)
        return int(counts[0]), int(counts[1])
    return failed, total
