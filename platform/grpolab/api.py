"""grpolab from Python: run an experiment, run a study, read results and curves as pandas.

    import grpolab
    out = grpolab.run("experiments/smoke.yaml", train={"steps": 5}, seed=1)
    grpolab.study("studies/dapo_table1.yaml", until_decided=True, max_seeds=8)   # `grpolab study`'s execute
    grpolab.results("studies/dapo_table1.yaml")       # tidy: rung, seed, step, metric, value, run_id
    grpolab.curves([out.run_id], ["entropy"])          # the same shape, one row per logged point

Input is validated as the command line validates it: bad input raises ``ConfigError`` (a
``ValueError``) naming the key and what is valid, before any model is loaded or any MLflow run
is created. The state folder is ``state=``, else ``$GRPOLAB_STATE``, else ``./grpolab-state``.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.startup import quiet_run, start_up
from grpolab.state import state_path

# A mapping given for one of these sections replaces it whole when it names a new identity (as
# `task='{name: ...}'` does on the command line); any other mapping is merged key by key.
IDENTITY_KEYS = {"task": ("name",), "method": ("base", "name"), "model": ("preset", "path")}


@dataclass(frozen=True)
class RunOutcome:
    """What ``grpolab.run`` returns: the MLflow run, its final numbers and where its files are.

    ``metrics`` holds the last finite value of every curve the run logged (held-out ``eval/*``
    at the final step included), under the names it has in MLflow. ``run_id`` and
    ``tracking_uri`` are None for an untracked run (``tracking.enabled: false``)."""

    run_id: str | None
    name: str
    method: str
    seed: int
    status: str
    steps: int
    metrics: dict
    eval_start: dict
    eval_final: dict
    wall_seconds: float
    state: Path
    run_dir: Path
    final_model: Path
    tracking_uri: str | None

    def curves(self, metrics: list[str] | None = None):
        """This run's curves as ``grpolab.curves`` returns them."""
        if self.run_id is None:
            raise ConfigError("curves: this run was not tracked (tracking.enabled: false), so MLflow has no curves")
        return curves([self.run_id], metrics, state=self.state)


@dataclass(frozen=True)
class StudyOutcome:
    """What ``grpolab.study`` returns: ``complete`` is True when every row (or trial) finished;
    otherwise ``results()`` shows the state of each one (FAIL, INTERRUPTED, ...)."""

    path: str
    name: str
    complete: bool
    state: Path
    storage: str | None
    parent_run_id: str | None

    def results(self):
        """The study's tidy frame, as ``grpolab.results`` returns it."""
        return results(self.path, state=self.state, storage=self.storage)

    def table(self, fmt: str = "markdown", metric: str | None = None) -> str:
        """The table ``grpolab table`` prints (markdown, csv or latex)."""
        from grpolab.report.tables import study_table
        return study_table(self.path, self.state, self.storage, fmt, metric)


def override_strings(overrides: dict, data: dict | None = None) -> list[str]:
    """Keyword overrides -> the command line's ``key.path=value`` strings. Keys may be dotted
    (``**{"train.steps": 5}``); a nested mapping is merged key by key (``train={"steps": 5}``)
    unless it names a new task, method or model (``task={"name": "countdown"}``), which then
    replaces the old one whole."""
    from grpolab.experiment.overrides import override_string
    out = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key or key.startswith(".") or key.endswith("."):
            raise ConfigError(f"override {key!r}: expected a key such as train.steps or seed")
        current = _lookup(data or {}, key)
        replaces = any(k in value for k in IDENTITY_KEYS.get(key, ())) if isinstance(value, dict) else True
        if isinstance(value, dict) and value and not replaces and isinstance(current, (dict, str)):
            out += override_strings({f"{key}.{k}": v for k, v in value.items()}, data)
        else:
            out.append(override_string(key, value))
    return out


def _lookup(data: dict, dotted: str):
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return {}   # absent: a mapping given here is merged into an empty one
        node = node[part]
    return node


def load(experiment, **overrides):
    """The validated configuration ``grpolab.run`` would train (a ``RunConfig``), without
    training: ``experiment`` is a YAML path or a dict in the experiment file's layout."""
    from grpolab.experiment.config import build_config, load_experiment
    from grpolab.experiment.overrides import apply_overrides
    if isinstance(experiment, (str, os.PathLike)):
        from grpolab.yaml_input import read_yaml_mapping
        data = read_yaml_mapping(Path(experiment), "experiment file", "give at least method and task")
        return load_experiment(experiment, override_strings(overrides, data))
    if not isinstance(experiment, dict):
        raise ConfigError(f"experiment: expected a YAML path or a dict, got {type(experiment).__name__}")
    return build_config(apply_overrides(experiment, override_strings(overrides, experiment)))


def run(experiment, *, state: str | os.PathLike | None = None, callbacks: list | None = None,
        **overrides) -> RunOutcome:
    """Train one experiment and record it in MLflow, as ``grpolab run`` does.

    ``experiment``: a YAML path or a dict (the experiment file's layout). ``overrides``: keyword
    values on top of it, e.g. ``seed=3``, ``train={"steps": 50}``, ``**{"method.eps_high": 0.28}``.
    ``callbacks``: extra ``transformers.TrainerCallback`` objects. Raises ``ConfigError`` on bad
    input before anything is loaded; a run that fails raises after its MLflow run ended FAILED."""
    from grpolab.state import state_dir
    from grpolab.tracking.stores import check_stores
    check_stores(state_path(state))   # an unreachable store fails in seconds, before anything is written
    start_up(state)
    cfg = load(experiment, **overrides)
    from grpolab.experiment.runner import run_experiment
    from grpolab.tracking.stores import prepare_stores
    folder = state_dir(state)
    prepare_stores(folder)
    trainers: list = []
    with quiet_run():
        result = run_experiment(cfg, folder, callbacks=list(callbacks or []), on_trainer=trainers.append)
    run_dir = Path(trainers[0].args.output_dir).resolve()
    return RunOutcome(
        run_id=result.run_id, name=cfg.name, method=cfg.method_name, seed=cfg.seed, status=result.status,
        steps=result.steps, metrics=_final_metrics(result), eval_start=dict(result.start_eval),
        eval_final=dict(result.final_eval), wall_seconds=result.wall_seconds, state=folder.resolve(),
        run_dir=run_dir, final_model=run_dir / "final",
        tracking_uri=_tracking_uri(folder) if result.run_id else None)


def _final_metrics(result) -> dict:
    """The last finite point of every training curve and the last held-out evaluation, under
    MLflow's names and with MLflow's exclusions (tracking.RunRecorder.log_metrics)."""
    from grpolab.tracking.naming import clean_metric_name
    from grpolab.tracking.recorder import stored_name
    out = {}
    for key, points in result.train_curves.items():
        finite = [(step, value) for step, value in points if math.isfinite(value)]
        if finite and stored_name(key) is not None:
            out[stored_name(key)] = max(finite, key=lambda p: p[0])[1]
    out.update({clean_metric_name(k): float(v) for k, v in result.final_eval.items()})
    return out


def _tracking_uri(state: Path) -> str:
    from grpolab.tracking.recorder import client_for
    return client_for(state).tracking_uri


def study(path: str | os.PathLike, *, progress: bool = True, **flags) -> StudyOutcome:
    """Run (or resume) a study file, as ``grpolab study`` does (the same checks, then the same
    ``execute``): every missing row of a ladder, or a search's trial budget. Returns when no row
    is left to run (or the time limit stops it); rows that failed are reported, never raised. ``progress``: print live
    progress to stderr.

    The keywords are the command's flags (``commands.study.API_FLAGS``):
    ``workers`` (default 1), ``state`` (the state folder), ``storage`` (an Optuna storage URL;
    default: a journal file in the state folder), ``retry_failed``, ``accept_changed``.
    Seeds on demand, as ``--until-decided --max-seeds N --batch B``: ``until_decided=True`` adds
    ``batch`` paired seeds per look (default: the file's, else 2) until every rung is decided or
    ``max_seeds`` (default: the file's cap) ran; a file with ``seeds: {first, batch, cap}`` does so
    by default, ``fixed_seeds=True`` runs its first seeds only. ``time_limit`` (minutes, as
    ``--time-limit``): no row starts that would end later; the rows left wait for the next call,
    and the looks of seeds on demand pause where they are. Where the workers run, as the
    command line's launch flags: ``gpus_per_row``/``devices``/``accelerate_config`` (each worker
    owns that many devices; default workers: pool // K), or ``launcher="slurm"`` with ``slurm``, a
    dict of SlurmLauncher options (jobs, partition, time, folder, cpus_per_job, account, qos, mem,
    constraint, exclude, setup: a list of shell lines, params: a dict of submitit parameters)."""
    from grpolab.commands.study import API_FLAGS, StudyFlags, execute, study_options
    from grpolab.state import confine_caches, state_dir
    unknown = sorted(set(flags) - set(API_FLAGS))
    if unknown:
        raise ConfigError(f"grpolab.study: unknown keyword {unknown[0]!r}; valid: progress, {', '.join(API_FLAGS)}")
    workers, state, storage = flags.get("workers"), flags.get("state"), flags.get("storage")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ConfigError(f"workers: must be an integer >= 1, got {workers!r}")
    echo = (lambda line: print(line, file=sys.stderr, flush=True)) if progress else (lambda line: None)
    options = study_options(path, StudyFlags(**flags, echo=echo, where=False))
    confine_caches(state_path(state))
    code = execute(options)
    from grpolab.commands.shared import parent_run_id
    limited = options.time_limit is not None
    complete = code == 0 and not (limited and _rows_left(options.study, state_dir(state), storage))
    return StudyOutcome(path=options.path, name=options.study.name, complete=complete,
                        state=state_dir(state).resolve(), storage=storage,
                        parent_run_id=parent_run_id(options.study, state_dir(state), storage))


def _rows_left(cfg, state: Path, storage: str | None) -> bool:
    """Whether rows wait (a ladder) or trials are still short (a search) after a time-limited run."""
    from grpolab.studies.storage import default_storage, load_existing, with_added_seeds
    study = load_existing(cfg, storage or default_storage(state))
    return study is not None and cfg.study_kind.pending(study, with_added_seeds(cfg, study))


def results(study: str | os.PathLike | StudyOutcome, *, state: str | os.PathLike | None = None,
            storage: str | None = None):
    """A study's results as one tidy pandas DataFrame, read from its Optuna storage (nothing
    runs): one row per (rung, seed, objective metric) of a ladder, per (trial, objective) of a
    search, with columns ``rung, seed, step, metric, value, run_id, rung_name, state, trial``
    (and a search's sampled parameters). ``value`` is the study metric of the whole run
    (``final:eval/pass_at_1``, ...), ``step`` the last optimizer step it covers; rows that did
    not complete are kept with value NaN and their state. ``grpolab table`` aggregates exactly
    this frame: per rung, the mean and 95 % t-interval of ``value`` over seeds."""
    from grpolab.analysis.ablation import load_results
    from grpolab.analysis.tidy import study_results
    from grpolab.state import state_path
    if isinstance(study, StudyOutcome):
        study, state, storage = study.path, state or study.state, storage or study.storage
    folder = state_path(state)
    if not folder.is_dir():
        raise ConfigError(f"state: no state folder at {folder.resolve()} (run the study first, or pass state=)")
    cfg, optuna_study = load_results(str(study), folder, storage)
    return study_results(optuna_study, cfg)


def curves(run_ids: str | list[str], metrics: list[str] | None = None, *,
           state: str | os.PathLike | None = None):
    """MLflow metric histories of runs as one tidy pandas DataFrame, the frame dashboards draw:
    columns ``rung, seed, step, metric, value, run_id, timestamp`` (one row per logged point;
    rung and seed from the run's tags, NaN when absent; timestamp in ms). ``metrics``: names
    as logged (default: every metric each run logged). An unknown run id raises ConfigError."""
    from grpolab.analysis.tidy import run_curves
    from grpolab.state import state_path
    from grpolab.tracking.recorder import client_for
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    if not ids or not all(isinstance(r, str) and r for r in ids):
        raise ConfigError(f"run_ids: expected MLflow run ids (strings), got {run_ids!r}")
    if metrics is not None and (isinstance(metrics, str) or not all(isinstance(m, str) for m in metrics)):
        raise ConfigError(f"metrics: expected a list of metric names, got {metrics!r}")
    return run_curves(client_for(state_path(state)), ids, metrics)


TINY_MODEL_MARK = "grpolab_tiny_model.json"   # marks a folder tiny_model wrote (and may write again)


def tiny_model(directory: str | os.PathLike, *, preset: str = "tiny", seed: int = 0) -> str:
    """Write a randomly initialised tiny causal LM and its tokenizer to ``directory`` and return
    the path, for a TRL or ``GrpoLabTrainer`` script on a machine without a model hub: ``model=``
    takes it where it takes a hub id. Nothing is downloaded: a Llama-family model built from a
    transformers config (``preset``: tiny ~0.1 M parameters, small ~2 M, medium ~20 M, initialised
    from ``seed``) and a character-level tokenizer over digits, lower-case letters, ``ACST``,
    ``+-*/=:;,.()#`` and space (any other character is ``<unk>``). A folder this function wrote
    before is rewritten; any other non-empty folder is refused, so no model of yours is overwritten."""
    from grpolab.world.models import PRESETS, build_model, save_model
    if preset not in PRESETS:
        raise ConfigError(f"tiny_model: unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"tiny_model: seed must be an int, got {seed!r}")
    folder = Path(directory)
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir()) and not (folder / TINY_MODEL_MARK).exists())):
        raise ConfigError(f"tiny_model: {str(folder)!r} exists and is not a folder tiny_model wrote (no "
                          f"{TINY_MODEL_MARK}): give a new or empty folder")
    with quiet_run():   # no "Writing model shards" bar for a 0.1 M-parameter model
        save_model(*build_model(preset, seed), folder)
    (folder / TINY_MODEL_MARK).write_text(f'{{"preset": "{preset}", "seed": {seed}}}\n')
    return str(folder)
