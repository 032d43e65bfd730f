"""A hub dataset's configs, splits and files are the ones ``datasets`` finds (tasks/data_files.py):
sharded files, compressed files, and a dataset card's ``configs:`` with ``data_files``, ``data_dir``
and ``default``. Hub caches written offline (tests/hub_cache.py); nothing downloads."""

import gzip
import io
import json

import pandas as pd
import pytest

from grpolab.errors import ConfigError
from grpolab.tasks import make_task
from hub_cache import go_offline, parquet_bytes, put_repo

CARD = """---
configs:
- config_name: easy
  data_files:
  - split: train
    path: "easy/part-*.jsonl"
  - split: holdout
    path: "holdout/easy.jsonl"
- config_name: hard
  default: true
  data_dir: hard
---
# two configs: easy lists its files per split, hard has a folder laid out by the hub's rules
"""


def sums(start: int, stop: int, op: str = "+") -> list[dict]:
    return [{"prompt": f"{i}{op}{i}=", "answer": str(2 * i if op == "+" else i * i)} for i in range(start, stop)]


def jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def csv(rows: list[dict]) -> bytes:
    buffer = io.StringIO()
    pd.DataFrame(rows).to_csv(buffer, index=False)
    return buffer.getvalue().encode()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf-hub")
    put_repo(cache, "tester/shards", {"data/train-00000-of-00002.parquet": parquet_bytes(sums(0, 20)),
                                      "data/train-00001-of-00002.parquet": parquet_bytes(sums(20, 40)),
                                      "data/test-00000-of-00001.parquet": parquet_bytes(sums(100, 108))}, "dataset")
    put_repo(cache, "tester/zipped", {"train.jsonl.gz": gzip.compress(jsonl(sums(0, 30))),
                                      "dev.jsonl.gz": gzip.compress(jsonl(sums(200, 206))),
                                      ".cache/leftover.jsonl": jsonl(sums(900, 950))}, "dataset")
    put_repo(cache, "tester/cards", {"README.md": CARD.encode(),
                                     "easy/part-0.jsonl": jsonl(sums(0, 6)), "easy/part-1.jsonl": jsonl(sums(6, 12)),
                                     "holdout/easy.jsonl": jsonl(sums(50, 55)),
                                     "hard/train.parquet": parquet_bytes(sums(10, 30, "*")),
                                     "hard/test.parquet": parquet_bytes(sums(60, 64, "*"))}, "dataset")
    put_repo(cache, "tester/mixed", {"train.jsonl": jsonl(sums(0, 10)), "test.csv": csv(sums(10, 15))}, "dataset")
    return cache


@pytest.fixture
def offline(hub, monkeypatch):
    return go_offline(monkeypatch, hub)


def prompts(examples) -> list[str]:
    return sorted(e.prompt for e in examples)


def test_sharded_files_make_one_split(offline):
    task = make_task("local_dataset", path="tester/shards", held_out={"split": "test"}, max_completion_length=4)
    train, held = task.splits(0, 100, 100)
    assert prompts(task.source.examples) == sorted(r["prompt"] for r in sums(0, 40))
    assert len(train) == 40 and prompts(held) == [f"{i}+{i}=" for i in range(100, 108)]


def test_compressed_files_are_read_and_dev_is_the_validation_split(offline):
    task = make_task("local_dataset", path="tester/zipped", held_out={"split": "validation"}, max_completion_length=4)
    train, held = task.splits(0, 100, 100)
    assert len(task.source.examples) == 30 and len(train) == 30   # the hidden folder's 50 rows are not data
    assert prompts(held) == [f"{i}+{i}=" for i in range(200, 206)]
    with pytest.raises(ConfigError, match=r"task.split: 'test' is not a split of 'tester/zipped' \(config default\); "
                                          "splits: train, validation$"):
        make_task("local_dataset", path="tester/zipped", split="test", max_completion_length=4)


def test_a_cards_configs_choose_files_per_split_data_dir_and_default(offline):
    hard = make_task("local_dataset", path="tester/cards", held_out={"split": "test"}, max_completion_length=4)
    assert prompts(hard.source.examples) == sorted(r["prompt"] for r in sums(10, 30, "*"))   # default: true
    assert prompts(hard.splits(0, 100, 100)[1]) == [f"{i}*{i}=" for i in range(60, 64)]
    easy = make_task("local_dataset", path="tester/cards", config="easy", held_out={"split": "holdout"},
                     max_completion_length=4)
    train, held = easy.splits(0, 100, 100)
    assert len(train) == 12 and prompts(held) == [f"{i}+{i}=" for i in range(50, 55)]
    for params, needle in [({"config": "nope"}, "task.config: 'tester/cards' has the configs easy, hard; 'nope' is not one"),
                           ({"config": "easy", "split": "test"},
                            "task.split: 'test' is not a split of 'tester/cards' (config easy); splits: train, holdout")]:
        with pytest.raises(ConfigError) as err:
            make_task("local_dataset", path="tester/cards", max_completion_length=4, **params)
        assert str(err.value) == needle
    with pytest.raises(ConfigError, match=r"^task.path: datasets cannot lay out 'tester/mixed' \(Couldn't infer the "
                                          "same data file format for all splits"):
        make_task("local_dataset", path="tester/mixed", max_completion_length=4)


def test_a_local_compressed_file_is_read(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl(sums(0, 10))))
    assert len(make_task("local_dataset", path=str(path), max_completion_length=4).source.examples) == 10
    (tmp_path / "rows.csv.bz2").write_bytes(b"not bzip2 at all")
    with pytest.raises(ConfigError, match="task.path: cannot read .*rows.csv.bz2"):
        make_task("local_dataset", path=str(tmp_path / "rows.csv.bz2"), max_completion_length=4)



def test_the_datasets_internals_that_discovery_reads_are_where_it_reads_them(tmp_path):
    """tasks/data_files.py relies on names that are not datasets' public API; when a release moves
    one, this names it (and the version) instead of a traceback deep in a task build."""
    import importlib

    import datasets
    moved = [f"{module}.{name}" for module, name in [
        ("datasets.load", "dataset_module_factory"), ("datasets.data_files", "DataFilesPatternsDict"),
        ("datasets.data_files", "EmptyDatasetError"), ("datasets.exceptions", "DatasetsError")]
        if not hasattr(importlib.import_module(module), name)]
    assert moved == [], f"datasets {datasets.__version__} moved {', '.join(moved)}"
    from datasets.data_files import DataFilesPatternsDict
    from datasets.load import dataset_module_factory
    assert callable(getattr(DataFilesPatternsDict, "resolve", None)), \
        f"datasets {datasets.__version__}: DataFilesPatternsDict.resolve moved"
    (tmp_path / "README.md").write_text(CARD)
    for name, rows in {"easy/part-0.jsonl": sums(0, 3), "holdout/easy.jsonl": sums(5, 7),
                       "hard/train.jsonl": sums(10, 13)}.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(jsonl(rows))
    parameters = getattr(dataset_module_factory(str(tmp_path)), "builder_configs_parameters", None)
    assert parameters is not None, f"datasets {datasets.__version__}: DatasetModule.builder_configs_parameters moved"
    missing = [f"BuilderConfigsParameters.{a}" for a in ("builder_configs", "default_config_name")
               if not hasattr(parameters, a)]
    missing += [f"BuilderConfig.{a}" for config in parameters.builder_configs or []
                for a in ("name", "data_files", "data_dir") if not hasattr(config, a)]
    assert missing == [], f"datasets {datasets.__version__} moved {', '.join(sorted(set(missing)))}"
    configs = {config.name: config for config in parameters.builder_configs}
    assert (sorted(configs), parameters.default_config_name) == (["easy", "hard"], "hard")
    easy = configs["easy"].data_files   # a card's patterns, which data_files.py resolves itself
    assert isinstance(easy, DataFilesPatternsDict)
    resolved = easy.resolve(str(tmp_path))
    assert {split: [f.rsplit("/", 2)[-2:] for f in files] for split, files in resolved.items()} == \
        {"train": [["easy", "part-0.jsonl"]], "holdout": [["holdout", "easy.jsonl"]]}
