"""A run's checkpoint folders on disk: where they are, which are complete, and whether a run can
be resumed from them with the configuration it was started with.

Torch-free, so that what only reads a state folder (a study's coordinator writing its tables,
``grpolab table``, ``dashboard``, ``verdicts``) and ``grpolab run --resume``'s refusals never import
the training stack; saving and restoring a trainer's state is ``checkpoints.py``. Detail: docs/runs.md,
"grpolab.experiment.checkpoints".
"""

from __future__ import annotations

import json
from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.tracking.naming import flat_keys

COMPLETE = "grpolab_complete.json"
CONFIG = "config.json"


def run_dir(state: Path, run_id: str) -> Path:
    return Path(state) / "runs" / run_id


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint folder cannot be resumed from, or None when it is complete and intact. Its
    completion marker is written last and lists every file with its size, so a save cut short (no
    marker) and a file cut or removed since (a size that differs) are both seen."""
    marker = Path(path) / COMPLETE
    if not marker.exists():
        return "no completion marker (its save was cut short)"
    try:
        record = json.loads(marker.read_text())
        int(record["step"])
        files = dict(record.get("files", {}))
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return f"its completion marker {COMPLETE} cannot be read ({type(exc).__name__})"
    for name, size in sorted(files.items()):
        file = Path(path) / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} is {file.stat().st_size} bytes, {size} when saved"
    return None


def checkpoint_folders(folder: Path) -> list[tuple[int, Path, str | None]]:
    """(step, path, problem) of every checkpoint-<step> folder of a run, oldest first."""
    found = []
    for path in Path(folder).glob("checkpoint-*"):
        step = path.name.removeprefix("checkpoint-")
        if step.isdigit():
            found.append((int(step), path, checkpoint_problem(path)))
    return sorted(found)


def complete_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete, intact checkpoint in a run folder, oldest first."""
    return [(step, path) for step, path, problem in checkpoint_folders(folder) if problem is None]


def unusable_checkpoints(folder: Path) -> str:
    """The run's checkpoint folders that cannot be resumed from, each with why ('' when none)."""
    return "; ".join(f"{path.name}: {problem}" for _, path, problem in checkpoint_folders(folder) if problem)


def find_resumable(state: Path, run_id: str) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = complete_checkpoints(run_dir(state, run_id))
    return found[-1][1] if found else None


def config_change(stored: dict, current: dict) -> str | None:
    """The first key whose value differs between two resolved configurations, described."""
    a, b = flat_keys(stored), flat_keys(json.loads(json.dumps(current, default=str)))
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            return f"{key} was {a.get(key, '<absent>')!r}, now {b.get(key, '<absent>')!r}"
    return None


def write_config(folder: Path, resolved: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG).write_text(json.dumps(resolved, indent=1, default=str))


def check_resume(state: Path, run_id: str, resolved: dict) -> Path:
    """The checkpoint to continue ``run_id`` from; ConfigError (exit 2) when there is none or
    the configuration changed since the run started."""
    folder = run_dir(state, run_id)
    ckpt = find_resumable(state, run_id)
    if ckpt is None and unusable_checkpoints(folder):
        raise ConfigError(f"--resume: run {run_id} has no usable checkpoint under {folder} "
                          f"({unusable_checkpoints(folder)}); start a new run instead")
    if ckpt is None:
        raise ConfigError(f"--resume: run {run_id} has no complete checkpoint under {folder} "
                          "(train.save_every = 0 saves only at the end); start a new run instead")
    try:
        stored = json.loads((folder / CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume: run {run_id}'s configuration {folder / CONFIG} cannot be read "
                          f"({type(exc).__name__}: {exc}); start a new run instead") from None
    change = config_change(stored, resolved)
    if change is not None:
        raise ConfigError(f"--resume: the configuration changed since run {run_id} started ({change}); "
                          "resume needs the same configuration, or start a new run")
    return ckpt


def resume_note(ckpt: Path) -> str:
    """Which checkpoint a resumed run continues from, and the newer ones it passed over and why."""
    newer = [f"{path.name} ({problem})" for step, path, problem in checkpoint_folders(Path(ckpt).parent)
             if problem and step > checkpoint_step(ckpt)]
    return f"resuming from {Path(ckpt).name} (step {checkpoint_step(ckpt)})" + (
        f"; not from the newer {', '.join(newer)}" if newer else "")


def resume_target(client, experiment: str, run_name: str, state: Path, run_id: str | None = None) -> str:
    """``run_id`` if it is an unfinished run, else the newest unfinished MLflow run of this name
    that has a complete checkpoint."""
    if run_id is not None:
        try:
            status = client.get_run(run_id).info.status
        except Exception:  # noqa: BLE001 - MLflow raises its own exception types for unknown ids
            raise ConfigError(f"--resume-run: no MLflow run with id {run_id!r}") from None
        if status == "FINISHED":
            raise ConfigError(f"--resume-run: run {run_id} already FINISHED; nothing to resume")
        return run_id
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{run_name}'",
                              order_by=["attributes.start_time DESC"]) if exp else []
    for run in runs:
        if run.info.status != "FINISHED" and find_resumable(state, run.info.run_id) is not None:
            return run.info.run_id
    for run in runs:
        unusable = unusable_checkpoints(run_dir(state, run.info.run_id)) if run.info.status != "FINISHED" else ""
        if unusable:
            raise ConfigError(f"--resume: run {run.info.run_id} ({run_name!r}) has no usable checkpoint under "
                              f"{run_dir(state, run.info.run_id)} ({unusable}); run without --resume to start anew")
    raise ConfigError(f"--resume: no unfinished run named {run_name!r} in experiment {experiment!r} has a "
                      f"complete checkpoint under {Path(state) / 'runs'}; run without --resume to start one")


def checkpoint_step(ckpt: Path) -> int:
    return json.loads((Path(ckpt) / COMPLETE).read_text())["step"]
