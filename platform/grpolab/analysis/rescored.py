"""Re-scored study metrics: what ``grpolab table STUDY --metric rescored:...`` reads in place of the
training-time evaluation, from the runs ``grpolab eval`` (rescore.py) nests under each row's run.

Detail: docs/studies.md, "grpolab.analysis.rescored".
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grpolab.analysis.strength import eval_draws
from grpolab.errors import ConfigError
from grpolab.experiment.config import EvalCfg
from grpolab.studies.definition import Objective, StudyConfig
from grpolab.studies.objectives import metric_range, objective_value
from grpolab.tasks.benchmarks import Benchmark
from grpolab.tracking.held_out import BENCHMARK_KEY, canonical_metric, is_eval_key

KINDS = {"n": int, "temperature": float, "top_p": float, "max_tokens": int, "size": int, "seed": int}   # grpolab eval's flags
SPEC = re.compile(r"^rescored(?:\[(?P<where>[^\]]*)\])?:(?:(?P<agg>[a-z_]+):)?(?P<key>eval/.*)$")
SYNTAX = ("rescored[QUALIFIERS]:[auc:]eval/<benchmark>/<score>, e.g. rescored:eval/aime/avg@16 or "
          "'rescored[temperature=0.6,step=200]:eval/aime/avg@16' (qualifiers: step, " + ", ".join(KINDS) + ")")


def is_rescored(metric: str | None) -> bool:
    return bool(metric) and metric.startswith("rescored")


@dataclasses.dataclass(frozen=True)
class RescoredSpec:
    agg: str               # final | auc
    key: str               # eval/<benchmark>/<score>, as MLflow stores it (avg_at_16)
    where: tuple           # (setting, value) qualifiers, step apart
    step: int | None       # one model's step; None: the final model (final) or every re-scored step (auc)

    @property
    def benchmark(self) -> str:
        return self.key.split("/")[1]

    @property
    def label(self) -> str:
        quals = [*(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.where),
                 *([f"step={self.step}"] if self.step is not None else [])]
        return f"rescored{'[' + ','.join(quals) + ']' if quals else ''}:{'auc:' if self.agg == 'auc' else ''}{self.key}"


def parse_rescored(text: str) -> RescoredSpec:
    match = SPEC.match(canonical_metric(text.strip()))
    if not match:
        raise ConfigError(f"--metric {text!r}: expected {SYNTAX}")
    agg, key = match.group("agg") or "final", match.group("key")
    if agg not in ("final", "auc"):
        raise ConfigError(f"--metric {text!r}: a re-scored metric reads the final model or the area under the "
                          f"re-scored curve (final: or auc:), got {agg}:")
    if not BENCHMARK_KEY.match(key):
        raise ConfigError(f"--metric {text!r}: {key!r} is no benchmark score; expected eval/<benchmark>/<score> with "
                          "score avg@n, pass@k, maj@n, sd@n or mean_length (the keys grpolab eval logs)")
    where, step = {}, None
    for item in filter(None, (p.strip() for p in (match.group("where") or "").split(","))):
        name, sep, value = (s.strip() for s in item.partition("="))
        if not sep or name not in (*KINDS, "step"):
            raise ConfigError(f"--metric {text!r}: qualifier {item!r}: expected setting=value with setting in step, "
                              f"{', '.join(KINDS)}")
        try:
            parsed = (int if name == "step" else KINDS[name])(value)
        except ValueError:
            kind = "an integer" if name == "step" or KINDS[name] is int else "a number"
            raise ConfigError(f"--metric {text!r}: qualifier {item!r}: {value!r} is not {kind}") from None
        if name == "step":
            step = parsed
        else:
            where[name] = parsed
    if step is not None and agg == "auc":
        raise ConfigError(f"--metric {text!r}: step= names one model; auc: reads every re-scored step")
    return RescoredSpec(agg, key, tuple(sorted(where.items())), step)


class Rescoring(NamedTuple):
    """One re-scored model of one row: a nested run of ``grpolab eval``."""
    of_run: str
    run_id: str
    step: int
    final: bool            # the run's final model (not a checkpoint)
    settings: tuple        # sorted (setting, value) of KINDS and source, max_tokens apart
    max_tokens: int
    value: float
    started: int           # ms: the latest of equal settings wins


def benchmark_settings(params: dict, name: str) -> dict:
    """The settings benchmark ``name`` was re-scored with, from a nested run's params (defaults filled in);
    ``source``: 'held_out' or the file / dataset as sorted (key, value) pairs."""
    prefix = f"benchmarks.{name}."
    raw = {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
    defaults = {f.name: f.default for f in dataclasses.fields(Benchmark)}
    out = {k: kind(raw.get(k, defaults[k])) for k, kind in KINDS.items()}
    parts = {k.removeprefix("source."): v for k, v in raw.items() if k.startswith("source.")}
    source = raw.get("source", "held_out")
    out["source"] = tuple(sorted(parts.items())) if parts else (source if source == "held_out" else (("path", source),))
    return out


def read_rescorings(state: Path, run_ids: set[str], key: str) -> dict[str, list[Rescoring]]:
    """Every re-scoring that logged ``key``, by the row run it is nested under."""
    from grpolab.tracking.recorder import client_for
    client, found, token = client_for(state), [], None
    experiments = sorted({client.get_run(r).info.experiment_id for r in run_ids})   # grpolab eval nests runs there
    while experiments:
        page = client.search_runs(experiments, "tags.`grpolab.eval.of_run` != ''", max_results=1000, page_token=token)
        found += page
        token = page.token
        if not token:
            break
    out: dict[str, list[Rescoring]] = {}
    bench = key.split("/")[1]
    for run in found:
        tags, metrics = run.data.tags, run.data.metrics
        if tags["grpolab.eval.of_run"] not in run_ids or key not in metrics:
            continue
        settings = benchmark_settings(run.data.params, bench)
        max_tokens = settings.pop("max_tokens")
        out.setdefault(tags["grpolab.eval.of_run"], []).append(Rescoring(
            tags["grpolab.eval.of_run"], run.info.run_id, int(tags["grpolab.eval.step"]),
            Path(tags.get("grpolab.eval.model", "")).name == "final", tuple(sorted(settings.items())), max_tokens,
            float(metrics[key]), int(run.info.start_time or 0)))
    return out


def at_model(spec: RescoredSpec, r: Rescoring) -> bool:
    """Whether ``r`` re-scored the model ``spec`` reads, with its qualifiers' settings."""
    if (spec.step is not None and r.step != spec.step) or (spec.agg == "final" and spec.step is None and not r.final):
        return False
    settings = {**dict(r.settings), "max_tokens": r.max_tokens}
    return all(settings[k] == v for k, v in spec.where)


def settings_text(settings, only) -> str:
    """'n=16,temperature=0.6': the settings (sorted (setting, value) pairs) named in ``only``."""
    return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings if k in only)


def source_text(source) -> str:
    return "the run's held-out draw" if source == "held_out" else settings_text(source, [k for k, _ in source])


def differing(choices) -> list[str]:
    """The settings that differ between ``choices`` (tuples of sorted (setting, value))."""
    keys = [k for k, _ in choices[0]]
    return [k for k in keys if len({dict(c)[k] for c in choices}) > 1]


class RowValue(NamedTuple):
    value: float
    max_tokens: int
    steps: int            # re-scored steps it reads


class Picked(NamedTuple):
    """A ladder's rows under a re-scored metric, and what its table states about it."""
    rows: pd.DataFrame     # ladder_rows with ``value`` re-scored (complete rows)
    cfg: StudyConfig       # its one objective: the re-scored metric (label, borrowed direction and smallest effect)
    draws: dict | None     # rung -> (prompts, samples) of the re-scoring (strength.eval_noise_sd); None: not a pass rate
    description: str       # the caption's first sentence: what was re-scored, how, and what the verdicts borrow
    settings: str          # n, temperature, top_p, max_tokens, prompts, seed


def pick_choice(spec: RescoredSpec, text: str, candidates: dict[str, list[Rescoring]]) -> tuple | None:
    """The one setting every row is read under (None: no row was re-scored so); several: an error
    naming each with the qualified metric that picks it."""
    rows_of: dict[tuple, set] = {}
    for run, found in candidates.items():
        for r in found:
            rows_of.setdefault(r.settings, set()).add(run)
    if len(rows_of) <= 1:
        return next(iter(rows_of), None)
    choices = sorted(rows_of, key=lambda c: (-len(rows_of[c]), c))
    keys = differing(choices)
    shown = []
    for c in choices:
        picked = dataclasses.replace(spec, where=tuple(sorted({**dict(spec.where), **{k: dict(c)[k] for k in keys
                                                                                     if k != "source"}}.items())))
        source = f" from {source_text(dict(c)['source'])}" if "source" in keys else ""
        shown.append(f"'{picked.label}'{source} ({len(rows_of[c])} of {len(candidates)} rows)")
    raise ConfigError(f"--metric {text!r}: the rows' models were re-scored with {len(choices)} settings "
                      f"({', '.join(keys)} {'differs' if len(keys) == 1 else 'differ'}); name one: {'; '.join(shown)}")


def row_value(spec: RescoredSpec, text: str, found: list[Rescoring], choice: tuple) -> RowValue | None:
    """The row's re-scored value under ``choice`` (None: it has none, or auc: fewer than 2 steps)."""
    mine = sorted((r for r in found if r.settings == choice), key=lambda r: r.started)
    tokens = sorted({r.max_tokens for r in mine})
    if len(tokens) > 1:
        options = "; ".join(f"'{dataclasses.replace(spec, where=tuple(sorted({**dict(spec.where), 'max_tokens': t}.items()))).label}'"
                            for t in tokens)
        raise ConfigError(f"--metric {text!r}: run {mine[0].of_run} was re-scored with max_tokens {tokens}; name one: {options}")
    latest = {r.step: r for r in mine}   # the same settings re-scored again: the latest run
    if not latest or (spec.agg == "auc" and len(latest) < 2):
        return None
    if spec.agg == "auc":
        value = objective_value(f"auc:{spec.key}", {s: {spec.key: r.value} for s, r in latest.items()}, {})
    else:
        value = mine[-1].value
    return RowValue(value, tokens[0], len(latest))


def eval_command(spec: RescoredSpec, cfg: StudyConfig, choice: tuple | None, targets: list[str], state: Path,
                 storage_url: str | None) -> str:
    """The ``grpolab eval`` command that re-scores ``targets`` (a study file or run ids) as ``spec`` reads them."""
    declared = {b.get("name"): b for b in (cfg.base.get("eval") or {}).get("benchmarks") or () if isinstance(b, dict)}
    base = {**{f.name: f.default for f in dataclasses.fields(Benchmark)}, **declared.get(spec.benchmark, {})}
    flags = {k: v for k, v in (choice or ()) if k in KINDS and v != base[k]}
    flags.update(dict(spec.where))
    sized = re.match(r"(?:avg|maj|sd)_at_([0-9]+)$", spec.key.rsplit("/", 1)[1])
    if sized and "n" not in flags and int(sized.group(1)) != base["n"]:
        flags["n"] = int(sized.group(1))
    source = dict(choice or ()).get("source")
    if spec.benchmark in declared or spec.benchmark == "held_out":
        bench = spec.benchmark
    else:   # a file benchmark is named after its file
        bench = dict(source)["path"] if isinstance(source, tuple) and len(source) == 1 else f"<the file of {spec.benchmark}>"
    args = ["--benchmark", str(bench)]
    for k in KINDS:
        if k in flags:
            args += [f"--{k.replace('_', '-')}", f"{flags[k]:g}" if isinstance(flags[k], float) else str(flags[k])]
    args += (["--checkpoints", "all"] if spec.agg == "auc" or spec.step is not None else []) + ["--state", str(state)]
    args += ["--storage", storage_url] if storage_url else []
    if len(targets) == 1:
        return f"grpolab eval {shlex.join([targets[0], *args])}"
    return f"for run in {' '.join(targets)}; do grpolab eval $run {shlex.join(args)}; done"


def missing_error(spec: RescoredSpec, text: str, missing: dict[str, str], complete: int, command: str,
                  others: int) -> ConfigError:
    which = {"final": "the final model", "auc": "at least 2 re-scored steps"}[spec.agg] if spec.step is None \
        else f"the model at step {spec.step}"
    extra = f" ({others} re-scoring(s) of {spec.key} with other settings or models exist)" if others else ""
    return ConfigError(f"--metric {text!r}: {len(missing)} of {complete} complete rows have no re-scoring of "
                       f"{spec.key} for {which} with these settings{extra}: {', '.join(missing.values())}; "
                       f"re-score them first: {command}")


def bench_of(key: str) -> str:
    """The benchmark an eval key reads: eval/<name>/<score>, or the held-out set's own keys."""
    return key.split("/")[1] if BENCHMARK_KEY.match(key) else "held_out"


def borrowed_objective(cfg: StudyConfig, spec: RescoredSpec) -> int | None:
    """The study objective a re-scored score re-measures (the module doc), or None."""
    keys = [o.metric.partition(":")[2] for o in cfg.objectives]
    if spec.key in keys:
        return keys.index(spec.key)
    if not spec.key.rsplit("/", 1)[1].startswith(("avg_at_", "pass_at_", "maj_at_")):
        return None
    return next((i for i, o in enumerate(cfg.objectives) if o.metric.partition(":")[0] in ("final", "auc")
                 and is_eval_key(keys[i]) and metric_range(o.metric) == (0.0, 1.0)), None)


def rescored_config(cfg: StudyConfig, spec: RescoredSpec) -> tuple[StudyConfig, str]:
    """(the study with the re-scored metric as its one objective and in its name, what its verdicts borrow)."""
    index = borrowed_objective(cfg, spec)
    obj = cfg.objectives[index] if index is not None else None
    objective = Objective(spec.label, obj.direction if obj else "maximize", obj.smallest_effect if obj else None)
    same_unit = index == 0 and bench_of(obj.metric.partition(":")[2]) == spec.benchmark
    rungs = cfg.rungs if same_unit else tuple(dataclasses.replace(r, published=None) for r in cfg.rungs)
    note = (f"verdicts take the direction and smallest effect of the study objective {obj.metric}"
            + ("" if same_unit or not any(r.published is not None for r in cfg.rungs) else
               " (the published values, in another unit, are left out)") if obj else
            "no study objective measures it in its unit: not judged")
    return dataclasses.replace(cfg, name=f"{cfg.name} [{spec.label}]", objectives=(objective,), rungs=rungs), note


def rescored_draws(cfg: StudyConfig, spec: RescoredSpec, choice: tuple, key: str) -> dict:
    """rung -> (prompts, samples) of ``key``, a score of the re-scoring (``draws_under``)."""
    return {i: draws_under(cfg.rung_experiment(i, cfg.seeds[0]), spec, choice, key) for i in range(len(cfg.rungs))}


def draws_under(experiment: dict, spec: RescoredSpec, choice: tuple, key: str) -> tuple[int, int] | None:
    """(prompts, samples) of ``key``, a score of the re-scoring, for one experiment config
    (``strength.eval_draws``: None where it is no pass rate)."""
    settings = dict(choice)
    source = settings["source"] if settings["source"] == "held_out" else dict(settings["source"])
    bench = {"name": spec.benchmark, "source": source, "size": settings["size"], "n": settings["n"]}
    ev = {**dataclasses.asdict(EvalCfg()), **(experiment.get("eval") or {}), "benchmarks": [bench]}
    return eval_draws(f"final:{key}", ev)


def span(values) -> str:
    """'4' or '4-8': the smallest and largest of ``values``."""
    values = sorted(values)
    return f"{values[0]}" if values[0] == values[-1] else f"{values[0]}-{values[-1]}"


def describe(spec: RescoredSpec, choice: tuple, values: list[RowValue], draws: dict, note: str,
             unit: str = "row") -> tuple[str, str]:
    """(the caption's sentence, the settings alone) of a re-scored metric; ``draws``: per rung the
    re-scoring's (prompts, samples), None where its size is not known here; ``unit``: what one value
    belongs to (a ladder's row, a search's trial)."""
    s = dict(choice)
    tokens = {v.max_tokens for v in values}
    prompts = {d[0] for d in draws.values() if d}
    settings = (f"n {s['n']}, temperature {s['temperature']:g}, top_p {s['top_p']:g}, max_tokens {span(tokens)}"
                + (" (each row's own)" if len(tokens) > 1 else "")
                + (f", {span(prompts)} prompts" if prompts else f", size {s['size'] or 'all'}")
                + f", seed {s['seed'] if s['seed'] >= 0 else 'the run seed'}")
    which = (f"the area under each {unit}'s re-scored curve / its step span ({span({v.steps for v in values})} steps)"
             if spec.agg == "auc" else f"each {unit}'s model at step {spec.step}" if spec.step is not None
             else f"each {unit}'s final model")
    return (f"{spec.label}: re-scored by `grpolab eval`, not the training-time evaluation: {spec.key} of {which} on "
            f"benchmark {spec.benchmark!r} ({source_text(s['source'])}), {settings}; {note}"), settings


def rescored_rows(rows: pd.DataFrame, cfg: StudyConfig, state: Path, text: str, study_path: str,
                  storage_url: str | None = None) -> Picked:
    """``rows`` (ladder_rows) with each complete row's value read from its re-scoring under ``text``;
    errors: a search study, several settings to read, a complete row without its re-scoring."""
    spec = parse_rescored(text)
    if not cfg.study_kind.paired_rungs:
        raise ConfigError(f"--metric {text!r}: {cfg.name} is a {cfg.kind}; its trials are read by "
                          "analysis.rescored_search.rescored_trials, not as a ladder's rows")
    complete = rows[rows.state == "COMPLETE"]
    names = {run: f"{cfg.rungs[int(r)].name!r} seed {s}" for r, s, run in zip(complete.rung, complete.seed, complete.run_id)
             if run}
    if not names:
        raise ConfigError(f"--metric {text!r}: {cfg.name} has no complete row yet (nothing to re-score)")
    found = read_rescorings(state, set(names), spec.key)
    candidates = {run: [r for r in found.get(run, []) if at_model(spec, r)] for run in names}
    choice = pick_choice(spec, text, candidates)
    values = {run: row_value(spec, text, candidates[run], choice) for run in names} if choice else dict.fromkeys(names)
    missing = {run: names[run] for run, v in values.items() if v is None}
    if missing:
        targets = [study_path] if len(missing) == len(names) else list(missing)
        others = sum(len(v) for v in found.values()) - sum(r.settings == choice for v in candidates.values() for r in v)
        raise missing_error(spec, text, missing, len(names),
                            eval_command(spec, cfg, choice, targets, state, storage_url), others)
    rows = rows.copy()
    rows["value"] = [values[run].value if run in values and done == "COMPLETE" else math.nan
                     for run, done in zip(rows.run_id, rows.state)]
    table_cfg, note = rescored_config(cfg, spec)
    draws = rescored_draws(table_cfg, spec, choice, spec.key) if spec.agg == "final" else None   # one model's pass rate
    prompts = rescored_draws(table_cfg, spec, choice, f"eval/{spec.benchmark}/pass_at_1")
    description, settings = describe(spec, choice, list(values.values()), prompts, note)
    return Picked(rows, table_cfg, draws, description, settings)
