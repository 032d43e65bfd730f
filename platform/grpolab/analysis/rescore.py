"""``grpolab eval``: re-score saved models on named benchmarks, with chosen n and decoding.

What is re-scored: a run (its MLflow id: its run folder ``<state>/runs/<id>/``), every run of a
study (a study file), or a run folder given as a directory. Which models: the final one (default)
or every complete checkpoint and the final one (``--checkpoints all``: a curve over steps).

Detail: docs/studies.md, "grpolab.analysis.rescore".
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import NamedTuple

from grpolab.errors import ConfigError
from grpolab.experiment.benchmark_runs import RunBenchmarks
from grpolab.experiment.checkpoint_files import CONFIG, complete_checkpoints, run_dir
from grpolab.experiment.config import EvalCfg, TrainCfg
from grpolab.experiment.runner import run_splits
from grpolab.experiment.vllm_eval import SavedModelVllm, uses_vllm
from grpolab.tasks import make_task
from grpolab.tracking.naming import flat_keys, state_relative
from grpolab.tracking.recorder import RunLink, RunRecorder, client_for
from grpolab.world.models import load_model

OVERRIDES = ("n", "temperature", "top_p", "max_tokens", "size", "seed")


class RunToScore(NamedTuple):
    run_id: str | None     # the MLflow run the nested runs go under (None: a folder MLflow does not know)
    folder: Path           # its run folder: config.json, checkpoint-<step>/, final/
    status: str | None = None   # a study's row or trial: how it ended (trial_status); None: named alone


class Rescored(NamedTuple):
    run_id: str | None
    step: int
    model: Path
    metrics: dict          # eval/<benchmark>/<score>
    nested_run_id: str | None


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """What re-scoring needs of a run, read back from its config.json."""
    task: dict
    seed: int
    train: TrainCfg
    eval: EvalCfg
    lora: bool
    generation: dict = dataclasses.field(default_factory=dict)   # a run that generated with vLLM is re-scored by it


def read_saved_run(folder: Path) -> SavedRun:
    path = Path(folder) / CONFIG
    if not path.exists():
        raise ConfigError(f"{str(folder)!r}: not a run folder (no {CONFIG}); give a run id, a study file or a "
                          "run folder <state>/runs/<run id>")
    data = json.loads(path.read_text())

    def section(cls, raw):   # fields a newer grpolab added take their defaults; fields it dropped are ignored
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if k == "band" else v for k, v in (raw or {}).items() if k in names})
    return SavedRun(data["task"], int(data.get("seed", 0)), section(TrainCfg, data.get("train")),
                    section(EvalCfg, data.get("eval")), bool((data.get("model") or {}).get("lora")),
                    dict(data.get("generation") or {}))


def runs_to_score(target: str, state: Path, storage_url: str | None = None) -> list[RunToScore]:
    """The runs ``target`` names: a run folder, a study file's rows, or an MLflow run id."""
    path = Path(target)
    if path.is_dir():
        run_id = path.name if path.resolve().parent == (Path(state) / "runs").resolve() else None
        return [RunToScore(run_id, path)]
    if path.is_file():
        from grpolab.analysis.ablation import load_results
        from grpolab.analysis.tidy import study_results
        cfg, study = load_results(target, state, storage_url, create=False)
        if study is None:
            raise ConfigError(f"{target}: the study has not run in {state} (no rows yet)")
        from grpolab.analysis.rescored_search import trial_status
        frame = study_results(study, cfg).drop_duplicates("run_id", keep="last")   # one row per objective
        return [RunToScore(i, run_dir(state, i), trial_status(st, step))
                for i, st, step in zip(frame.run_id, frame.state, frame.step)
                if isinstance(i, str) and i and run_dir(state, i).is_dir()]
    folder = run_dir(state, target)
    if not folder.is_dir():
        raise ConfigError(f"{target!r}: neither a run folder, a study file nor a run id with a folder in {state}/runs")
    return [RunToScore(target, folder)]


def found_models(folder: Path, saved: SavedRun, which: str) -> list[tuple[int, Path]]:
    """(step, model folder): the final model, and with ``which="all"`` every complete checkpoint
    (none: the run kept neither)."""
    if which not in ("final", "all"):
        raise ConfigError(f"--checkpoints: expected final or all, got {which!r}")
    if saved.lora:
        raise ConfigError(f"{str(folder)!r}: a LoRA run keeps adapters only; re-scoring them is not supported")
    found = complete_checkpoints(folder) if which == "all" else []
    final = Path(folder) / "final"
    if final.is_dir():
        found = [(s, p) for s, p in found if s != saved.train.steps] + [(saved.train.steps, final)]
    return found


def models_to_score(folder: Path, saved: SavedRun, which: str) -> list[tuple[int, Path]]:
    """``found_models``; a run without one is an error."""
    found = found_models(folder, saved, which)
    if not found:
        raise ConfigError(f"{str(folder)!r}: no final model" + (" nor complete checkpoint" if which == "all" else "")
                          + " (a run that did not finish keeps checkpoints only: --checkpoints all)")
    return found


def benchmark_specs(names: list[str], saved: SavedRun, overrides: dict) -> list[dict]:
    """The benchmarks ``names`` pick, with ``overrides`` (None: keep) applied."""
    if not names:
        raise ConfigError("--benchmark: give at least one (a name in the run's eval.benchmarks, held_out, or a file)")
    declared = {b["name"]: dict(b) for b in saved.eval.benchmarks}
    specs = []
    for name in names:
        if name in declared:
            spec = declared[name]
        elif name == "held_out":
            spec = {"name": "held_out", "source": "held_out"}
        elif Path(name).exists() or "/" in name:
            spec = {"name": file_benchmark_name(name), "source": name}
        else:
            raise ConfigError(f"--benchmark: {name!r} is not a benchmark of the run (declared: "
                              f"{', '.join(declared) or 'none'}), nor held_out, nor a file or hub dataset")
        spec.update({k: v for k, v in overrides.items() if v is not None})
        if not spec.get("max_tokens"):
            spec["max_tokens"] = saved.eval.max_completion_length
        specs.append(spec)
    return specs


_DATA_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip", ".jsonl", ".json", ".csv", ".tsv", ".parquet", ".arrow", ".txt")


def file_benchmark_name(source: str) -> str:
    """A file or hub dataset's benchmark name: its last path part without data and compression
    suffixes (``aime.2024.jsonl.gz`` -> ``aime.2024``), other characters than letters, digits,
    '_', '.' and '-' made '_' so it is one metric key part (``eval/<name>/<score>``)."""
    name = Path(source).name
    while name.lower().endswith(_DATA_SUFFIXES):
        name = name[:name.rfind(".")]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip("_.-")
    return name or "file"


def rescore(target: str, state: Path, names: list[str], overrides: dict | None = None, which: str = "final",
            storage_url: str | None = None, echo=print) -> list[Rescored]:
    """Score every model of every run ``target`` names on ``names``; one nested MLflow run each."""
    unknown = set(overrides or {}) - set(OVERRIDES)
    if unknown:
        raise ConfigError(f"overrides: unknown {sorted(unknown)[0]!r}; valid: {', '.join(OVERRIDES)}")
    out = []
    runs = planned_runs(target, runs_to_score(target, Path(state), storage_url), which, echo)
    # a benchmark a run lacks, or a run that needs vLLM where there is none, is refused before any model is scored
    run_specs = [benchmark_specs(names, saved, overrides or {}) for _, saved, _ in runs]
    engines = [uses_vllm(saved.generation, f"run {run.run_id or run.folder}") for run, saved, _ in runs]
    for (run, saved, models), specs, vllm in zip(runs, run_specs, engines):
        for step, model_dir in models:
            metrics = score_model(saved, specs, model_dir, vllm)
            nested = record(state, run.run_id, step, model_dir, specs, metrics)
            out.append(Rescored(run.run_id, step, model_dir, metrics, nested))
            shown = ", ".join(f"{k.removeprefix('eval/')} {v:.4g}" for k, v in metrics.items() if "/avg_at_" in k
                              or "/maj_at_" in k)
            echo(f"{run.run_id or run.folder} step {step}: {shown}" + (f" (nested run {nested})" if nested else ""))
    return out


def planned_runs(target: str, runs: list[RunToScore], which: str, echo) -> list[tuple[RunToScore, SavedRun, list]]:
    """Each run with the models it has to score, decided before any is scored: a study's run without
    one (a pruned, failed or running trial keeps no final model) is named in one line and left out,
    so the others are scored and the study's table still published; a run named alone without one
    is an error, as is a study none of whose runs has one."""
    planned = []
    for run in runs:
        if run.status is not None and not (run.folder / CONFIG).exists():
            echo(f"{run.run_id}: not re-scored, {run.status}: its run folder has no {CONFIG}")
            continue
        saved = read_saved_run(run.folder)
        if run.status is None:
            planned.append((run, saved, models_to_score(run.folder, saved, which)))
            continue
        found = found_models(run.folder, saved, which)
        if found:
            planned.append((run, saved, found))
            continue
        steps = [s for s, _ in complete_checkpoints(run.folder)]
        echo(f"{run.run_id}: not re-scored, {run.status}: no final model"
             + (" nor complete checkpoint" if which == "all" else
                f" (checkpoints kept at steps: {', '.join(map(str, steps))}; --checkpoints all re-scores them)"
                if steps else ""))
    if runs and not planned:
        raise ConfigError(f"{target}: none of its {len(runs)} runs has a model to re-score (each named above)")
    return planned


def score_model(saved: SavedRun, specs: list[dict], model_dir: Path, vllm: bool = False) -> dict:
    """The benchmarks' scores of one saved model, drawn exactly as the run would draw them: through
    transformers generate, or through vLLM (``vllm``) when the run generated with it."""
    task = make_task(saved.task["name"], **{k: v for k, v in saved.task.items() if k != "name"})
    train, _ = run_splits(saved, task)
    engine = SavedModelVllm(saved.generation, saved.train.trl, model_dir) if vllm else None
    model, tokenizer = (engine.model, engine.tokenizer) if engine else load_model(model_dir)
    metrics, _ = RunBenchmarks.for_run(saved, task, train, tokenizer, specs).evaluate(task, model, tokenizer, engine)
    return metrics


def record(state: Path, run_id: str | None, step: int, model_dir: Path, specs: list[dict], metrics: dict) -> str | None:
    """A nested MLflow run under ``run_id`` (in its experiment) with ``metrics`` at ``step``."""
    if run_id is None:
        return None
    client = client_for(state)
    parent = client.get_run(run_id)
    experiment = client.get_experiment(parent.info.experiment_id).name
    names = ",".join(s["name"] for s in specs)
    tags = {"grpolab.eval.of_run": run_id, "grpolab.eval.step": step, "grpolab.eval.benchmarks": names,
            "grpolab.eval.model": state_relative(model_dir, state)}
    params = {"benchmarks": {s["name"]: flat_keys({k: v for k, v in s.items() if k != "name"}) for s in specs}}
    with RunRecorder(state, experiment, f"eval {names} @ step {step}", tags, params,
                     link=RunLink(parent_run_id=run_id)) as recorder:
        recorder.log_metrics(metrics, step=step)
        nested = recorder.run_id
    return nested
