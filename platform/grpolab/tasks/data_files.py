"""Which files of a hub dataset snapshot hold one config and split, decided by ``datasets`` itself.

``datasets.load.dataset_module_factory`` reads the folder as ``load_dataset`` would: the dataset
card's ``configs:`` (README.md YAML header, or a standalone ``.huggingface.yaml``: per config its
``data_files`` and ``data_dir``, which config is the default), else the hub's file-name rules
(``data/train-00000-of-00002.parquet``, ``test.jsonl.gz``, ``validation/``...; files that name no
split are all ``train``; hidden files and the card are left out). Only the discovery is borrowed:
nothing is downloaded, converted to Arrow or cached, and the files found are read by
grpolab.tasks.sources. As in ``load_dataset``, all splits of a config share one format.

Configs are chosen as ``load_dataset`` chooses them: the named one, else the card's default
(``default: true``, or the config named ``default``), else the only one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grpolab.errors import ConfigError


@dataclass(frozen=True)
class DatasetLayout:
    """A snapshot's configs (name -> split -> files) and the config used when none is named."""
    configs: dict[str, dict[str, list[Path]]]
    default: str | None


def dataset_layout(folder: Path, key: str, repo_id: str) -> DatasetLayout:
    import datasets
    from datasets.data_files import DataFilesPatternsDict, EmptyDatasetError
    from datasets.load import dataset_module_factory
    try:
        module = dataset_module_factory(str(Path(folder).resolve()))
        parameters = module.builder_configs_parameters
        configs = {}
        for builder_config in parameters.builder_configs or []:
            files = builder_config.data_files
            if isinstance(files, DataFilesPatternsDict):   # a card's patterns, resolved as the builder does
                base = os.path.join(folder, builder_config.data_dir) if builder_config.data_dir else str(folder)
                files = files.resolve(base)
            configs[builder_config.name] = {str(split): [Path(f) for f in paths] for split, paths in (files or {}).items()}
    except EmptyDatasetError:
        raise ConfigError(f"{key}.path: {repo_id!r} holds no data files datasets can read (in {folder})") from None
    except (ValueError, FileNotFoundError, RuntimeError, datasets.exceptions.DatasetsError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{key}.path: datasets cannot lay out {repo_id!r} ({first})") from None
    default = parameters.default_config_name or (next(iter(configs)) if len(configs) == 1 else None)
    return DatasetLayout(configs, default)


def hub_data_files(folder: Path, config: str | None, split: str, key: str, repo_id: str) -> list[Path]:
    """The data files of one config and split of a hub dataset snapshot (its configs, splits and
    files as ``datasets`` finds them)."""
    layout = dataset_layout(folder, key, repo_id)
    name = config or layout.default
    if name not in layout.configs:
        raise ConfigError(f"{key}.config: {repo_id!r} has the configs {', '.join(layout.configs)}; "
                          + (f"{config!r} is not one" if config else "name one"))
    splits = layout.configs[name]
    if split not in splits:
        raise ConfigError(f"{key}.split: {split!r} is not a split of {repo_id!r} (config {name}); "
                          f"splits: {', '.join(splits) or 'none'}")
    if not splits[split]:
        raise ConfigError(f"{key}.path: {repo_id!r} holds no data files for config {name}, split {split} (in {folder})")
    return splits[split]
