"""What a task is, for every kind: ``Example``, the ``Task`` base, and the one way splits are drawn.

The kinds: generated toy tasks (world/generated.py), dataset and reasoning-gym tasks
(tasks/verified.py, tasks/sources.py) and multi-turn environments (envs/episode_task.py); the
registry of ``task.name`` values is grpolab.tasks. A kind says where its examples come from
through one hook, ``draws``; ``Task.splits`` turns that into disjoint, capped train and held-out
sets the same way for all of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str
    meta: dict = field(default_factory=dict, hash=False, compare=False)


class Draws(NamedTuple):
    """A kind's candidates, in order: the held-out set is the first ``n_eval`` of ``held``, the
    training set the first ``n_train`` of ``train`` whose prompt is not held out."""
    held: Iterable[Example]
    train: Iterable[Example]
    # the prompts training avoids when they are more than the n_eval drawn (a dataset's whole held-out part)
    held_pool: Iterable[Example] | None = None
    # one example per prompt; a dataset keeps its rows as they are (one question may carry two references)
    distinct: bool = True


def disjoint_splits(draws: Draws, n_train: int, n_eval: int) -> tuple[list[Example], list[Example]]:
    """(train, held-out) from a kind's candidates: held out first, then training without its prompts."""
    held = _take(draws.held, n_eval, set(), draws.distinct)
    pool = held if draws.held_pool is None else draws.held_pool
    return _take(draws.train, n_train, {e.prompt for e in pool}, draws.distinct), held


def _take(candidates: Iterable[Example], n: int, exclude: set[str], distinct: bool) -> list[Example]:
    """The first n candidates whose prompt is not excluded (nor, with distinct, taken already);
    nothing more is drawn once n are taken, so a generator's draws stop there."""
    seen, out = set(exclude), []
    if n <= 0:
        return out
    for example in candidates:
        if example.prompt in seen:
            continue
        if distinct:
            seen.add(example.prompt)
        out.append(example)
        if len(out) == n:
            break
    return out


def seeded_draws(name: str, draw: Callable[[random.Random], Example], seed, n_train: int, n_eval: int,
                 held_out_seed=None) -> Draws:
    """Candidates of a kind that generates examples from an unbounded space: the held-out and the
    training streams are seeded apart, so ``held_out_seed`` fixes one held-out set for every run
    seed. At most 50 draws per example wanted: a small space (2-digit sums) may hold fewer."""
    held = seed if held_out_seed is None else held_out_seed
    # the streams are named by the seeds' text (1 and 1.0 draw differently)
    eval_rng, train_rng = random.Random(f"{name}-eval-{held}"), random.Random(f"{name}-train-{seed}")
    return Draws((draw(eval_rng) for _ in range(50 * n_eval)), (draw(train_rng) for _ in range(50 * n_train)))


class Task:
    """What the trainer, the warm start and the held-out evaluation ask of every task kind.

    ``score`` returns one value per name of ``reward_names``; the first component (or ``correct``)
    is the verifiable correctness that ``is_correct`` tells. ``target`` writes a warm start's SFT
    target. A kind implements those and ``draws``; ``splits`` is the same for all."""

    name: str
    params: dict
    reward_names: tuple[str, ...]
    max_completion_length: int
    fixed_held_out = False   # splits takes held_out_seed (eval.seed): the kind's held-out stream is seeded apart

    def splits(self, seed, n_train: int, n_eval: int,
               held_out_seed=None) -> tuple[list[Example], list[Example]]:
        """(train, held-out) for a run seed: the held-out set is drawn first and no training example
        shares a prompt with it; each is capped at its count (a small space or dataset may give
        fewer). ``held_out_seed`` (a kind with ``fixed_held_out``) draws the held-out set from that
        seed's stream instead of ``seed``'s."""
        if n_train < 0 or n_eval < 0:
            raise ValueError(f"task {self.name!r}: splits takes counts >= 0, got n_train={n_train}, n_eval={n_eval}")
        if held_out_seed is not None and not self.fixed_held_out:
            raise TypeError(f"task {self.name!r} keeps its own held-out split; it takes no held_out_seed")
        return disjoint_splits(self.draws(seed, n_train, n_eval, held_out_seed), n_train, n_eval)

    def draws(self, seed, n_train: int, n_eval: int, held_out_seed) -> Draws:
        """Where this kind's held-out and training examples come from, for ``splits``."""
        raise NotImplementedError

    def target(self, example: Example, rng: random.Random) -> str:
        raise NotImplementedError

    def score(self, example: Example, completion: str) -> dict[str, float]:
        raise NotImplementedError

    def is_correct(self, example: Example, completion: str) -> bool:
        raise NotImplementedError
