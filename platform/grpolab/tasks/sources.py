"""Where examples come from: local files or ``datasets`` directories, hub datasets (``org/name``
in the Hugging Face cache, hub.py), and reasoning-gym.

Every source yields ``Example(prompt=question, answer=reference, meta)`` and gives its task's
``draws`` (world/task.py): seeded, disjoint train and held-out sets, no held-out question ever a
training question.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from grpolab.errors import ConfigError
from grpolab.hub import HubRef, looks_like_hub_id
from grpolab.hub import fetch as fetch_hub
from grpolab.hub import resolve as resolve_hub
from grpolab.tasks.answers import make_extractor
from grpolab.tasks.data_files import hub_data_files
from grpolab.world.task import Draws, Example

FILE_KINDS = (".jsonl", ".json", ".parquet", ".csv")
COMPRESSIONS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}   # of .jsonl, .json and .csv files


def file_kind(path: Path) -> tuple[str, str | None]:
    """(format suffix, compression suffix or None): ``train.jsonl.gz`` -> (".jsonl", ".gz")."""
    suffixes = [s.lower() for s in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] in COMPRESSIONS and suffixes[-2] != ".parquet":
        return suffixes[-2], suffixes[-1]
    return (suffixes[-1] if suffixes else ""), None


def _read_jsonl(path: Path, compression: str | None) -> list[dict]:
    rows = []
    opener = COMPRESSIONS[compression] if compression else open
    try:
        with opener(path, "rt", encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as exc:
        raise ConfigError(f"task.path: cannot read {str(path)!r}: {exc}") from None
    for i, line in enumerate(text.splitlines()):
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
    """Rows of a local .jsonl/.json/.parquet/.csv file (the text formats also .gz, .bz2, .xz) or a
    ``datasets.save_to_disk`` folder."""
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
    suffix, compression = file_kind(p)
    if suffix == ".jsonl":
        return _read_jsonl(p, compression)
    import pandas as pd
    try:
        if suffix == ".parquet":
            frame = pd.read_parquet(p)
        elif suffix == ".csv":
            frame = pd.read_csv(p, dtype=str, keep_default_na=False)   # answers stay strings ("007")
        elif suffix == ".json":
            frame = pd.read_json(p)
        else:
            raise ConfigError(f"task.path: {path!r} has an unknown extension; valid: {', '.join(FILE_KINDS)} (.jsonl, "
                              f".json and .csv also compressed: {', '.join(COMPRESSIONS)}) or a datasets folder")
    except (ValueError, OSError) as exc:
        raise ConfigError(f"task.path: cannot read {path!r}: {exc}") from None
    return frame.to_dict(orient="records")


HELD_OUT_KEYS = ("path", "revision", "config", "split", "prompt_field", "answer_field", "reference_extract")
_MISSING = object()
_READ_CACHE: dict[tuple, list[dict]] = {}   # (file, mtime, size) -> rows: each rung of a study validates the same file


@dataclass(frozen=True)
class Rows:
    """Where a task's rows are: a local file or ``datasets`` folder, or a hub dataset (hub.py)."""
    path: str
    split: str | None
    config: str | None = None
    hub: HubRef | None = None
    key: str = "task"            # the task key whose settings these are (task, task.held_out)

    @property
    def available(self) -> bool:
        """Readable now (a local path, or a hub dataset already in the cache)."""
        return self.hub is None or self.hub.folder is not None

    def where(self) -> str:
        if self.hub is None:
            return repr(self.path)
        return f"{self.path!r} (config {self.config or 'default'}, split {self.split})"


def locate_rows(path, split=None, config=None, revision=None, key: str = "task") -> Rows:
    """A local path as before; a path that does not exist and reads ``org/name``: a hub dataset,
    looked up in the local hub cache (not downloaded; hub.resolve says what happens without it)."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{key}.path: expected a path string or a hub dataset id (org/name), got {path!r}")
    for name, value in (("split", split), ("config", config), ("revision", revision)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{key}.{name}: expected a name, got {value!r}")
    if Path(path).exists() or not looks_like_hub_id(path):
        for name, value in (("config", config), ("revision", revision)):
            if value is not None:
                raise ConfigError(f"{key}.{name}: only for a hub dataset (org/name); {path!r} is a local path")
        if not Path(path).exists():
            raise ConfigError(f"{key}.path: cannot read {path!r}: no such file or directory (nor an org/name hub id)")
        return Rows(path, split, key=key)
    return Rows(path, split or "train", config, resolve_hub(path, "dataset", revision, f"{key}.path"), key)


def read_rows(rows: Rows) -> tuple[list[dict], HubRef | None]:
    """The rows (a hub dataset is fetched into the cache first when it is not there and downloads
    are allowed) and the hub snapshot they came from."""
    if rows.hub is None:
        return _cached_read(Path(rows.path), rows.split), None
    ref = fetch_hub(rows.hub)
    records = []
    for file in hub_data_files(ref.folder, rows.config, rows.split, rows.key, rows.path):
        records.extend(_cached_read(file, None))
    return records, ref


def _cached_read(path: Path, split: str | None) -> list[dict]:
    if path.is_dir():
        return read_records(str(path), split)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, split)
    if key not in _READ_CACHE:
        if len(_READ_CACHE) >= 4:
            _READ_CACHE.pop(next(iter(_READ_CACHE)))
        _READ_CACHE[key] = read_records(str(path), split)
    return _READ_CACHE[key]


def field_value(row: dict, name: str):
    """``row[name]``, or a dotted path into nested columns (``reward_model.ground_truth``)."""
    if name in row:
        return row[name]
    node = row
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def prompt_text(value) -> str:
    """A question: a string, or chat messages ``[{role, content}, ...]`` (the last user message)."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()   # a parquet list column arrives as a numpy array
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) and "content" in m for m in value):
        users = [m for m in value if m.get("role", "user") == "user"] or list(value)
        return str(users[-1]["content"])
    return str(value)


def to_examples(records: list[dict], prompt_field: str, answer_field: str, reference_extract: str, where: str,
                key: str = "task") -> list[Example]:
    """Examples from rows; exact repeats of a (question, reference) pair count once (some hub sets
    repeat every row, e.g. for avg@k evaluation)."""
    to_reference = make_extractor(reference_extract)
    for field_key, name in (("prompt_field", prompt_field), ("answer_field", answer_field)):
        if records and field_value(records[0], name) is _MISSING:
            raise ConfigError(f"{key}.{field_key}: column {name!r} is not in {where}; columns: {', '.join(map(str, records[0]))}")
    examples, seen = [], set()
    for i, row in enumerate(records):
        prompt, answer = field_value(row, prompt_field), field_value(row, answer_field)
        if name_missing := [n for n, v in ((prompt_field, prompt), (answer_field, answer)) if v is _MISSING or v is None]:
            raise ConfigError(f"{key}.path: row {i + 1} of {where} has no {name_missing[0]!r}")
        reference = to_reference(str(answer))
        if reference is None:
            raise ConfigError(f"{key}.reference_extract: row {i + 1} of {where} holds no {reference_extract} answer")
        question = prompt_text(prompt)
        if (question, reference) not in seen:
            seen.add((question, reference))
            examples.append(Example(question, reference, {"row": i}))
    return examples


def _check_reference_extract(value, key: str) -> None:
    if value == "regex":
        raise ConfigError(f"{key}.reference_extract: regex is not supported for references; valid: none, hash, boxed, "
                          "last_number, answer_tag")


class RowFields(NamedTuple):
    """Which columns of a dataset's rows hold the prompt and the answer, and how the reference
    answer is read from the answer column (``reference_extract``)."""
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    reference_extract: str = "none"


class LocalSource:
    """Rows of a local dataset or a hub dataset. The held-out set is a seeded ``eval_fraction``
    of them, or, with ``held_out``, another dataset, config or split (e.g. AIME 2024 held out
    from a training set): then no training question is a held-out question. A hub dataset not
    yet in the cache is read when the run starts (after its download); otherwise the rows are
    read and checked now, before any model loads."""

    def __init__(self, path: str, fields: RowFields = RowFields(), eval_fraction: float = 0.1,
                 split: str | None = None, revision: str | None = None, config: str | None = None,
                 held_out: dict | str | None = None):
        if not isinstance(eval_fraction, (int, float)) or not 0 < float(eval_fraction) < 1:
            raise ConfigError(f"task.eval_fraction: must be strictly between 0 and 1, got {eval_fraction!r}")
        _check_reference_extract(fields.reference_extract, "task")
        make_extractor(fields.reference_extract)
        self.rows = locate_rows(path, split, config, revision, "task")
        self.fields = fields
        self.held_out = self._held_out(held_out, path, config, revision) if held_out is not None else None
        self.eval_fraction = float(eval_fraction)
        self._examples: list[Example] | None = None
        self._held: list[Example] | None = None
        self._pinned: dict[str, str] = {}
        if self.rows.available and (self.held_out is None or self.held_out[0].available):
            self._load()

    def _held_out(self, raw, path, config, revision) -> tuple[Rows, tuple]:
        if isinstance(raw, str):
            raw = {"path": raw}
        if not isinstance(raw, dict):
            raise ConfigError(f"task.held_out: expected a mapping of {', '.join(HELD_OUT_KEYS)} (or a path / hub id), got {raw!r}")
        unknown = set(raw) - set(HELD_OUT_KEYS)
        if unknown:
            raise ConfigError(f"task.held_out.{sorted(unknown)[0]}: unknown key; valid: {', '.join(HELD_OUT_KEYS)}")
        same = raw.get("path", path) == path   # another split or config of the training set inherits its revision
        rows = locate_rows(raw.get("path", path), raw.get("split"), raw.get("config", config if same else None),
                           raw.get("revision", revision if same else None), "task.held_out")
        if (rows.path, rows.split, rows.config) == (self.rows.path, self.rows.split, self.rows.config):
            raise ConfigError("task.held_out: names the training rows themselves; give another split, config or path "
                              "(or leave held_out out: a seeded eval_fraction of the rows is held out)")
        fields = RowFields(*(raw.get(k, v) for k, v in zip(RowFields._fields, self.fields)))
        _check_reference_extract(fields.reference_extract, "task.held_out")
        make_extractor(fields.reference_extract)
        return rows, fields

    def _load(self) -> None:
        if self._examples is not None:
            return
        records, ref = read_rows(self.rows)
        examples = to_examples(records, *self.fields, self.rows.where())
        if len(examples) < 4:
            raise ConfigError(f"task.path: {self.rows.where()} holds {len(examples)} examples; at least 4 are needed")
        if ref is not None:
            self._pinned["dataset"] = ref.pinned()
        if self.held_out is not None:
            rows, fields = self.held_out
            held_records, held_ref = read_rows(rows)
            self._held = to_examples(held_records, *fields, rows.where(), "task.held_out")
            if not self._held:
                raise ConfigError(f"task.held_out: {rows.where()} holds no examples")
            held_prompts = {e.prompt for e in self._held}
            if all(e.prompt in held_prompts for e in examples):
                raise ConfigError(f"task.held_out: every training question of {self.rows.where()} is also held out")
            if held_ref is not None:
                self._pinned["held_out"] = held_ref.pinned()
        self._examples = examples

    @property
    def loaded(self) -> bool:
        return self._examples is not None

    @property
    def examples(self) -> list[Example]:
        self._load()
        return self._examples

    def hub_refs(self) -> dict[str, str]:
        """``dataset`` / ``held_out`` -> ``org/name@commit`` of the hub snapshots read."""
        return dict(self._pinned)

    def draws(self, seed: int, n_train: int, n_eval: int) -> Draws:
        """The rows shuffled by the seed: the held-out set is their first ``eval_fraction`` (or the
        ``held_out`` rows, shuffled apart), and training skips every held-out question."""
        order = list(self.examples)
        random.Random(f"local-{seed}").shuffle(order)
        if self._held is not None:
            held = list(self._held)
            random.Random(f"local-held-{seed}").shuffle(held)
            return Draws(held, order, self._held, distinct=False)
        k = max(1, int(len(order) * self.eval_fraction))
        return Draws(order[:k], order[k:], order[:k], distinct=False)

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

    def draws(self, seed: int, n_train: int, n_eval: int) -> Draws:
        """Odd generator seeds give the held-out examples, even ones training's; a training draw
        that repeats a held-out question is one example short."""
        return Draws(self._draw(2 * seed + 1, n_eval), self._draw(2 * seed, n_train), distinct=False)

    def score(self, example: Example, answer: str) -> float:
        return float(self.scorer.score_answer(answer, example.meta["entry"]))
