"""Where examples come from: local files or ``datasets`` directories, and reasoning-gym.

Every source yields ``Example(prompt=question, answer=reference, meta)`` and splits seeded,
disjoint train and held-out sets: no held-out question is ever a training question.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..errors import ConfigError
from ..world.tasks import Example
from .answers import make_extractor

FILE_KINDS = (".jsonl", ".json", ".parquet", ".csv")


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"task.path: line {i + 1} of {str(path)!r} is not JSON") from None
        if not isinstance(item, dict):
            raise ConfigError(f"task.path: line {i + 1} of {str(path)!r} is not a JSON object")
        rows.append(item)
    return rows


def read_records(path: str, split: str | None = None) -> list[dict]:
    """Rows of a local .jsonl/.json/.parquet/.csv file or a ``datasets.save_to_disk`` folder."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"task.path: cannot read {path!r}: no such file or directory")
    if p.is_dir():
        import datasets
        try:
            data = datasets.load_from_disk(str(p))
        except Exception as exc:  # noqa: BLE001 - any failure means it is not a datasets folder
            raise ConfigError(f"task.path: {path!r} is not a datasets folder saved with save_to_disk ({exc})") from None
        if isinstance(data, datasets.DatasetDict):
            if (split or "train") not in data:
                raise ConfigError(f"task.split: {split or 'train'!r} not in {path!r}; splits: {', '.join(data)}")
            data = data[split or "train"]
        return data.to_list()
    if split is not None:
        raise ConfigError("task.split: only a datasets folder has splits; remove task.split for a file")
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(p)
    import pandas as pd
    try:
        if suffix == ".parquet":
            frame = pd.read_parquet(p)
        elif suffix == ".csv":
            frame = pd.read_csv(p, dtype=str, keep_default_na=False)   # answers stay strings ("007")
        elif suffix == ".json":
            frame = pd.read_json(p)
        else:
            raise ConfigError(f"task.path: {path!r} has an unknown extension; valid: {', '.join(FILE_KINDS)} or a datasets folder")
    except (ValueError, OSError) as exc:
        raise ConfigError(f"task.path: cannot read {path!r}: {exc}") from None
    return frame.to_dict(orient="records")


class LocalSource:
    """Rows of a local dataset; the held-out split is a seeded ``eval_fraction`` of them."""

    def __init__(self, path: str, prompt_field: str = "prompt", answer_field: str = "answer",
                 eval_fraction: float = 0.1, split: str | None = None, reference_extract: str = "none"):
        if not isinstance(path, str):
            raise ConfigError(f"task.path: expected a path string, got {path!r}")
        if not isinstance(eval_fraction, (int, float)) or not 0 < float(eval_fraction) < 1:
            raise ConfigError(f"task.eval_fraction: must be strictly between 0 and 1, got {eval_fraction!r}")
        if reference_extract == "regex":
            raise ConfigError("task.reference_extract: regex is not supported for references; valid: none, hash, boxed, "
                              "last_number, answer_tag")
        to_reference = make_extractor(reference_extract)
        records = read_records(path, split)
        for key, name in (("prompt_field", prompt_field), ("answer_field", answer_field)):
            if records and name not in records[0]:
                raise ConfigError(f"task.{key}: column {name!r} is not in {path!r}; columns: {', '.join(map(str, records[0]))}")
        self.examples = []
        for i, row in enumerate(records):
            if name_missing := [n for n in (prompt_field, answer_field) if n not in row or row[n] is None]:
                raise ConfigError(f"task.path: row {i + 1} of {path!r} has no {name_missing[0]!r}")
            reference = to_reference(str(row[answer_field]))
            if reference is None:
                raise ConfigError(f"task.reference_extract: row {i + 1} of {path!r} holds no {reference_extract} answer")
            self.examples.append(Example(str(row[prompt_field]), reference, {"row": i}))
        if len(self.examples) < 4:
            raise ConfigError(f"task.path: {path!r} holds {len(self.examples)} examples; at least 4 are needed")
        self.eval_fraction = float(eval_fraction)

    def splits(self, seed: int, n_train: int, n_eval: int) -> tuple[list[Example], list[Example]]:
        order = list(self.examples)
        random.Random(f"local-{seed}").shuffle(order)
        k = max(1, int(len(order) * self.eval_fraction))
        held_out = order[:k][:n_eval]
        held_prompts = {e.prompt for e in order[:k]}
        return [e for e in order[k:] if e.prompt not in held_prompts][:n_train], held_out

    def score(self, example: Example, answer: str) -> float:
        raise ConfigError("task.grade: task is only valid for reasoning_gym tasks; use math, numeric or exact")


class ReasoningGymSource:
    """A reasoning-gym procedural dataset. Held-out and training examples come from two
    generator seeds derived from the run seed; training drops any held-out question."""

    def __init__(self, dataset: str, config: dict | None = None):
        try:
            import reasoning_gym
            from reasoning_gym.factory import DATASETS
        except ImportError:
            raise ConfigError("task.name: reasoning_gym needs the reasoning-gym package: "
                              "pip install 'grpolab[tasks]'") from None
        if dataset not in DATASETS:
            raise ConfigError(f"task.dataset: unknown reasoning-gym dataset {dataset!r}; valid: {', '.join(sorted(DATASETS))}")
        if not isinstance(config or {}, dict):
            raise ConfigError(f"task.config: expected a mapping of {dataset} settings, got {config!r}")
        self.dataset, self.config = dataset, dict(config or {})
        try:   # builds and checks the generator's configuration now, before any model loads
            self.scorer = reasoning_gym.create_dataset(dataset, size=1, seed=0, **self.config)
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(f"task.config: not a valid {dataset} configuration: {exc}") from None

    def _draw(self, seed: int, size: int) -> list[Example]:
        import reasoning_gym
        data = reasoning_gym.create_dataset(self.dataset, size=max(size, 1), seed=seed, **self.config)
        return [Example(entry["question"], str(entry["answer"]), {"entry": entry}) for entry in data][:size]

    def splits(self, seed: int, n_train: int, n_eval: int) -> tuple[list[Example], list[Example]]:
        held_out = self._draw(2 * seed + 1, n_eval)       # odd generator seeds: held out; even: training
        held_prompts = {e.prompt for e in held_out}
        train = [e for e in self._draw(2 * seed, n_train) if e.prompt not in held_prompts]
        return train, held_out

    def score(self, example: Example, answer: str) -> float:
        return float(self.scorer.score_answer(answer, example.meta["entry"]))
