"""A study's base model shipped as files: its warm start trained once and written as a folder whose
content digest every row checks (``model.path`` + ``model.sha256``).

A warm start trained on each machine is one base model per machine: its floating-point path
follows the CPU's kernels, so two machines start their rows from different models. A paper's
ladder starts from one published checkpoint; this is that checkpoint for a toy ladder.

    python -m grpolab.studies.base_model STUDY.yaml OUT_FOLDER [--state DIR]

prints the ``model:`` lines to put in the study's ``base:``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import shutil
import sys
from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.experiment.model_files import content_digest
from grpolab.state import state_path
from grpolab.studies.definition import load_study, quiet_build
from grpolab.tasks import task_of

PROVENANCE = "base_model.json"


def export_base_model(study_path: str, out: Path, state: Path) -> str:
    """Train (or find in ``state``) the warm start of ``study_path``'s first rung, copy it to ``out``
    with a provenance record, and return the folder's content digest."""
    from grpolab.experiment.starting_model import resolve_model

    study = load_study(study_path)
    cfg = quiet_build(study.rung_experiment(0, study.seeds[0]))
    if cfg.model.path is not None:
        raise ConfigError(f"{study_path}: its base already starts from model.path {cfg.model.path}; nothing to export")
    if cfg.warm_start.seed < 0:
        raise ConfigError(f"{study_path}: warm_start.seed is the run seed, so every seed has its own base model; "
                          "set warm_start.seed to share one before shipping it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out}: exists{' and is not a folder' if not out.is_dir() else ' and is not empty'}; "
                          "give a new folder")
    task = task_of(cfg.task)
    folder, record = resolve_model(cfg, task, state)
    shutil.copytree(folder, out, dirs_exist_ok=True)
    import torch
    import transformers
    (out / PROVENANCE).write_text(json.dumps({
        "study": study.name, "file": str(study_path), "preset": cfg.model.preset, "task": dict(cfg.task),
        "warm_start_seed": cfg.warm_start.seed, "warm_start_cache": folder.name,   # world.warmstart.cache_key
        # every warm_start setting of the study, so that the cache key above can be recomputed from this file
        "warm_start_settings": {k: list(v) if isinstance(v, tuple) else v
                                for k, v in dataclasses.asdict(cfg.warm_start).items()},
        "warm_start": {k: v for k, v in record.items() if k not in ("history", "cache_hit")},
        # a warm start found in the state's cache may have been trained on another machine than this one
        "found_in_state_cache": bool(record.get("cache_hit")),
        "exported_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                          "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine()},
        "date": datetime.date.today().isoformat(),
    }, indent=2, sort_keys=True) + "\n")
    return content_digest(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpolab.studies.base_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("study")
    parser.add_argument("out", type=Path)
    parser.add_argument("--state", type=Path, default=None, help="the state folder (default: as grpolab's)")
    args = parser.parse_args(argv)
    try:
        digest = export_base_model(args.study, args.out, state_path(args.state))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"model: {{path: {args.out}, sha256: {digest}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
