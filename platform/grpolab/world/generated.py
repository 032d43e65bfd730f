"""Verifiable toy tasks, generated deterministically from a seed (the kind ``GeneratedTask``).

Every task yields ``Example(prompt, answer, meta)`` and scores a completion into named reward
components (the first component, or ``correct``, is the verifiable correctness). Its examples
come from seeded streams (world/task.py): a held-out seed fixes one eval set for every run seed.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Callable

from grpolab.errors import ConfigError
from grpolab.world.task import Draws, Example, Task, seeded_draws


@dataclass(frozen=True)
class GeneratedTask(Task):
    """A task: a generator of examples, an SFT target writer and a verifier."""

    name: str
    params: dict
    reward_names: tuple[str, ...]
    max_completion_length: int
    _generate: Callable[[random.Random, dict], Example]
    _target: Callable[[Example, random.Random, dict], str]
    _score: Callable[[Example, str, dict], dict[str, float]]
    _correct: Callable[[Example, str], bool]
    fixed_held_out = True

    def splits(self, seed: int, n_train: int, n_eval: int,
               held_out_seed: int | None = None) -> tuple[list[Example], list[Example]]:
        """``Task.splits``, kept: they are a pure function of the key, and a run asks for its splits
        about 5 times. The eval draw is sequential, so the first m of n eval prompts are the
        m-prompt set (a subset, same order)."""
        held = seed if held_out_seed is None else held_out_seed
        # the streams are named by the seeds' text (1 and 1.0 draw differently); examples are shared, never changed
        key = (self.name, repr(sorted(self.params.items())), f"{seed}", f"{held}", n_train, n_eval)
        if key not in _SPLITS:
            train_set, eval_set = super().splits(seed, n_train, n_eval, held_out_seed)
            if len(_SPLITS) >= _SPLITS_KEPT:
                del _SPLITS[next(iter(_SPLITS))]
            _SPLITS[key] = (tuple(train_set), tuple(eval_set))
        train_set, eval_set = _SPLITS[key]
        return list(train_set), list(eval_set)

    def draws(self, seed, n_train: int, n_eval: int, held_out_seed) -> Draws:
        return seeded_draws(self.name, lambda rng: self._generate(rng, self.params), seed, n_train, n_eval,
                            held_out_seed)

    def target(self, example: Example, rng: random.Random) -> str:
        return self._target(example, rng, self.params)

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return self._score(example, completion, self.params)

    def is_correct(self, example: Example, completion: str) -> bool:
        return self._correct(example, completion)


# The splits drawn last (a task's params are integers, its generator deterministic), oldest dropped first.
_SPLITS: dict[tuple, tuple[tuple[Example, ...], tuple[Example, ...]]] = {}
_SPLITS_KEPT = 32


def _strip(completion: str) -> str:
    return completion.strip()


# --- addition -----------------------------------------------------------------------------

def _carries(a: int, b: int) -> int:
    carry, count = 0, 0
    while a or b:
        carry = 1 if (a % 10 + b % 10 + carry) >= 10 else 0
        count += carry
        a, b = a // 10, b // 10
    return count


def _gen_addition(rng: random.Random, p: dict) -> Example:
    lo, hi = 10 ** (p["digits"] - 1) if p["digits"] > 1 else 0, 10 ** p["digits"] - 1
    while True:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        c = _carries(a, b)
        if p["min_carries"] <= c <= p["max_carries"]:
            return Example(f"{a}+{b}=", str(a + b), {"a": a, "b": b, "carries": c})


def _answer_after_colon(completion: str) -> str:
    """The scratchpad task's answer is whatever follows the last ':' (the pad is free text)."""
    return _strip(completion.rsplit(":", 1)[-1])


def _column_work(ex: Example) -> str:
    """Every column, least significant first (``digit+digit+carry=sum``), then ``:`` and the answer."""
    a, b, carry, steps = ex.meta["a"], ex.meta["b"], 0, []
    while a or b or carry:
        s = a % 10 + b % 10 + carry
        steps.append(f"{a % 10}+{b % 10}+{carry}={s}")
        carry, a, b = s // 10, a // 10, b // 10
    return ",".join(steps) + ":" + ex.answer


def _scratch_target(ex: Example, rng: random.Random, p: dict) -> str:
    """Half the SFT targets show column work, half answer directly: lengths vary by design."""
    return ex.answer if rng.random() < 0.5 else _column_work(ex)


def _gen_columns(rng: random.Random, p: dict) -> Example:
    """Two addends of one width, drawn per prompt, so the column work's length grows with the
    difficulty and spreads over many lengths instead of a few fixed ones. Each extra digit of width
    is drawn ``width_decay`` % as often as the one before: below 100 the lengths get a thin long
    tail, so a cap near their 88th percentile leaves fewer correct answers just under it."""
    widths = range(p["min_digits"], p["max_digits"] + 1)
    weights = [(p["width_decay"] / 100) ** i for i in range(len(widths))]
    # uniform widths through rng.choice: the same draws as randint over the range
    width = rng.choice(widths) if p["width_decay"] == 100 else rng.choices(widths, weights)[0]
    lo, hi = 10 ** (width - 1) if width > 1 else 0, 10 ** width - 1
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    return Example(f"{a}+{b}=", str(a + b), {"a": a, "b": b, "digits": width, "carries": _carries(a, b)})


def _columns_target(ex: Example, rng: random.Random, p: dict) -> str:
    """``direct`` percent of the SFT targets answer directly (short, and wrong once the model cannot
    add that wide in one go), the rest show every column; ``checked`` percent of those write the
    columns twice (``work;work:answer``), a long mode that is still right when it is not cut: the
    lengths get a gap between concise and checked work, so a cap in that gap truncates completions
    that could have been right while few concise correct ones sit just under it."""
    if rng.random() * 100 < p["direct"]:
        return ex.answer
    work = _column_work(ex)
    # no draw when checked is 0: the targets of runs made before this mode existed stay the same
    if p["checked"] and rng.random() * 100 < p["checked"]:
        return work.rsplit(":", 1)[0] + ";" + work
    return work


def _columns_cap(p: dict) -> int:
    """Room for the longest column work: d + 1 columns of at most 8 characters, commas, ':', the
    (d + 1)-digit answer and EOS, twice over when some targets are checked. Runs set their own,
    shorter cap (train.max_completion_length)."""
    once = 9 * (p["max_digits"] + 1) + p["max_digits"] + 2
    return 2 * once if p["checked"] else once


def _format_target(ex: Example, rng: random.Random, p: dict) -> str:
    return f"({ex.answer})" if rng.random() < 0.7 else ex.answer


_FORMAT = re.compile(r"^\((\d+)\)$")


def _format_score(ex: Example, completion: str, p: dict) -> dict[str, float]:
    text = _strip(completion)
    digits = re.sub(r"[()]", "", text)
    return {"format": float(bool(_FORMAT.match(text))), "correct": float(digits == ex.answer)}


def _random_reward(ex: Example, completion: str, p: dict) -> dict[str, float]:
    """Reward independent of correctness: a fair coin keyed by (salt, prompt, completion)."""
    h = hashlib.sha256(f"{p['salt']}|{ex.prompt}|{completion}".encode()).digest()
    return {"random": float(h[0] % 2)}


# --- countdown ----------------------------------------------------------------------------

def _gen_countdown(rng: random.Random, p: dict) -> Example:
    while True:
        nums = [rng.randint(1, p["max_number"]) for _ in range(p["numbers"])]
        order = nums[:]
        rng.shuffle(order)
        expr = str(order[0])
        for n in order[1:]:
            expr += rng.choice("+-*") + str(n)
        target = eval(expr)  # noqa: S307 - expr is built here from digits and +-* only
        if 0 < target <= p["max_target"]:
            return Example(f"C{','.join(map(str, nums))}T{target}=", expr, {"numbers": nums, "target": target})


_EXPR = re.compile(r"^\d+([+\-*]\d+)*$")


def _countdown_correct(ex: Example, completion: str) -> bool:
    expr = _strip(completion)
    if not _EXPR.match(expr):
        return False
    used = sorted(int(x) for x in re.findall(r"\d+", expr))
    pool = list(ex.meta["numbers"])
    for n in used:  # each given number at most once
        if n not in pool:
            return False
        pool.remove(n)
    return eval(expr) == ex.meta["target"]  # noqa: S307 - validated by _EXPR


# --- sorting ------------------------------------------------------------------------------

def _gen_sorting(rng: random.Random, p: dict) -> Example:
    nums = [rng.randint(0, p["max_number"]) for _ in range(p["length"])]
    return Example(f"S{','.join(map(str, nums))}=", ",".join(map(str, sorted(nums))), {"numbers": nums})


def _exact(ex: Example, completion: str) -> bool:
    return _strip(completion) == ex.answer


def _correct_only(correct: Callable[[Example, str], bool]):
    return lambda ex, completion, p: {"correct": float(correct(ex, completion))}


def _answer_only(ex: Example, rng: random.Random, p: dict) -> str:
    return ex.answer


def _scratch_correct(ex: Example, completion: str) -> bool:
    return _answer_after_colon(completion) == ex.answer


def _format_correct(ex: Example, completion: str) -> bool:
    return _format_score(ex, completion, {})["correct"] == 1.0


_ADDITION = {"digits": 2, "min_carries": 0, "max_carries": 99}
_COLUMNS = {"min_digits": 2, "max_digits": 5, "direct": 50, "width_decay": 100, "checked": 0}
# name -> (defaults, reward names, max completion length(params), generate, target, score, correct)
TASKS: dict[str, tuple] = {
    "addition": (_ADDITION, ("correct",), lambda p: p["digits"] + 4,
                 _gen_addition, _answer_only, _correct_only(_exact), _exact),
    "addition_scratchpad": (_ADDITION, ("correct",), lambda p: 12 * (p["digits"] + 1) + 8,
                            _gen_addition, _scratch_target, _correct_only(_scratch_correct), _scratch_correct),
    "addition_columns": (_COLUMNS, ("correct",), _columns_cap,
                         _gen_columns, _columns_target, _correct_only(_scratch_correct), _scratch_correct),
    "addition_format": (_ADDITION, ("format", "correct"), lambda p: p["digits"] + 6,
                        _gen_addition, _format_target, _format_score, _format_correct),
    "countdown": ({"numbers": 3, "max_number": 9, "max_target": 99}, ("correct",), lambda p: 4 * p["numbers"] + 4,
                  _gen_countdown, _answer_only, _correct_only(_countdown_correct), _countdown_correct),
    "sorting": ({"length": 4, "max_number": 9}, ("correct",), lambda p: 3 * p["length"] + 4,
                _gen_sorting, _answer_only, _correct_only(_exact), _exact),
    "random_reward": ({**_ADDITION, "salt": 0}, ("random",), lambda p: p["digits"] + 4,
                      _gen_addition, _answer_only, _random_reward, _exact),
}


def make_task(name: str, **params) -> GeneratedTask:
    """Build a task by name; unknown names or parameters raise ConfigError naming the valid ones."""
    if name not in TASKS:
        raise ConfigError(f"task.name: unknown task {name!r}; valid: {', '.join(sorted(TASKS))} "
                          "(grpolab.tasks adds local_dataset and reasoning_gym)")
    defaults, rewards, max_len, gen, target, score, correct = TASKS[name]
    unknown = set(params) - set(defaults)
    if unknown:
        raise ConfigError(f"task.{sorted(unknown)[0]}: not a parameter of task {name!r}; valid: {', '.join(sorted(defaults))}")
    merged = {**defaults, **params}
    for key, value in merged.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"task.{key}: expected a non-negative integer, got {value!r}")
    if "digits" in merged and not 1 <= merged["digits"] <= 12:
        raise ConfigError(f"task.digits: must be between 1 and 12, got {merged['digits']}")
    if "max_digits" in merged and not 1 <= merged["min_digits"] <= merged["max_digits"] <= 12:
        raise ConfigError(f"task.min_digits, task.max_digits: need 1 <= min_digits <= max_digits <= 12, "
                          f"got {merged['min_digits']} and {merged['max_digits']}")
    for key in ("direct", "checked"):
        if merged.get(key, 0) > 100:
            raise ConfigError(f"task.{key}: a percentage of SFT targets, 0 to 100, got {merged[key]}")
    if merged.get("min_carries", 0) > merged.get("max_carries", 99):
        raise ConfigError("task.min_carries: must not exceed task.max_carries")
    for key in ("numbers", "length", "max_number", "max_target"):   # 0 would leave nothing to draw (countdown's
        if key in merged and merged[key] < 1:                            # generator would loop for ever)
            raise ConfigError(f"task.{key}: must be at least 1, got {merged[key]}")
    if merged.get("min_carries", 0) > merged.get("digits", 0) and "digits" in merged:
        raise ConfigError(f"task.min_carries: two {merged['digits']}-digit numbers make at most {merged['digits']} "
                          f"carries, got {merged['min_carries']}; valid: 0 to {merged['digits']}")
    return GeneratedTask(name, merged, rewards, max_len(merged), gen, target, score, correct)
