"""A study's plan before it runs (``grpolab study FILE --plan [--tokens-per-second X]``): its rows,
devices, generated tokens and GPU-hours, from the file alone. The whole study is validated while
planning (grpolab.planning): no model is loaded and torch is not imported; what the machine that
runs it needs (a GPU, vLLM, hub downloads not in the local cache) is listed, not raised; the
file's own mistakes still exit 2.

Detail: docs/studies.md, "grpolab.studies.plan".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from grpolab.errors import ConfigError
from grpolab.planning import plan_note, planning
from grpolab.experiment.config import build_config
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.studies.definition import load_study
from grpolab.studies.kinds import kind_named
from grpolab.studies.launch_options import check_accelerate_config, check_rows_fit
from grpolab.tasks import task_of
from grpolab.tasks.sources import locate_rows, read_rows


@dataclass(frozen=True)
class RowPlan:
    name: str                 # the rung (ladders) or "each trial" (searches)
    rows: int                 # rows of this shape (seeds of a rung; trials of a search)
    rollouts: int
    prompts: int
    group_size: int
    completion_tokens: int    # L
    cap: int
    evals: int
    eval_prompts: int
    eval_k: int
    eval_completion_tokens: int
    devices: int
    final_prompts: int        # the last evaluation's prompts and samples (eval.final_*; the fixed benchmark)
    final_k: int
    dynamic_rounds: int       # 1, or method.max_sampling_rounds under dynamic sampling
    benchmark_tokens: int = 0   # one evaluation's named benchmarks: sum of size x n x L_benchmark

    @property
    def train_tokens(self) -> int:
        return self.rollouts * self.prompts * self.group_size * self.completion_tokens

    @property
    def eval_tokens(self) -> int:
        before = (self.evals - 1) * self.eval_prompts * (self.eval_k + 1)
        return ((before + self.final_prompts * (self.final_k + 1)) * self.eval_completion_tokens
                + self.evals * self.benchmark_tokens)

    @property
    def tokens(self) -> int:
        return self.train_tokens + self.eval_tokens

    def gpu_hours(self, tokens_per_second: float) -> float:
        return self.devices * self.tokens / tokens_per_second / 3600


@dataclass
class StudyPlan:
    path: str
    name: str
    kind: str
    seeds: int
    rows: list[RowPlan]
    expected: int | None          # plan.expected_completion_tokens
    devices_source: str
    on_demand: tuple | None = None                     # (batch, cap, max_rows) of a ladder's seeds: {first, batch, cap}
    needs: list[str] = field(default_factory=list)     # what the running machine needs (grpolab.planning)
    notes: list[str] = field(default_factory=list)     # ladder checks, search caveats

    @property
    def total_rows(self) -> int:
        return sum(r.rows for r in self.rows)

    @property
    def total_tokens(self) -> int:
        return sum(r.rows * r.tokens for r in self.rows)

    def gpu_hours(self, tokens_per_second: float) -> float:
        return sum(r.rows * r.gpu_hours(tokens_per_second) for r in self.rows)


BUDGET_KEYS = ("train.steps", "train.prompts_per_rollout", "train.group_size", "train.minibatches",
               "train.num_iterations", "train.max_completion_length", "eval.every", "eval.prompts", "eval.k")


def plan_study(path: str, gpus_per_row: int | None = None) -> StudyPlan:
    """Validate the study for a plan and size each of its rows (docs/studies.md, "grpolab.studies.plan")."""
    if gpus_per_row is not None and (isinstance(gpus_per_row, bool) or gpus_per_row < 1):
        raise ConfigError(f"--gpus-per-row: must be an integer >= 1, got {gpus_per_row!r}")
    with planning() as needs, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = load_study(path)
        expected = study.plan.get("expected_completion_tokens")
        if gpus_per_row is not None:
            devices, source = gpus_per_row, "--gpus-per-row"
        elif "devices_per_row" in study.plan:
            devices, source = study.plan["devices_per_row"], "plan.devices_per_row"
        else:
            devices, source = 1, "default: one device per row"
        if study.launcher.accelerate_config:   # its num_processes must agree with the row's devices
            accelerate = check_accelerate_config(study.launcher.accelerate_config, devices,
                                                 f"launcher.accelerate_config (with {source} {devices})")
            check_rows_fit(accelerate, study, "launcher.accelerate_config")
            source += f"; launched by accelerate with {accelerate}"
        shapes, notes = study.study_kind.plan_rows(study, BUDGET_KEYS)
        shapes = [(name, rows, build_config(experiment)) for name, rows, experiment in shapes]
        sized = [_row(name, rows, cfg, expected, devices) for name, rows, cfg in shapes]
    return StudyPlan(str(path), study.name, study.kind, len(study.seeds), sized, expected, source,
                     tuple(study.on_demand) if study.on_demand else None, list(needs), notes)


def _row(name: str, rows: int, cfg, expected: int | None, devices: int) -> RowPlan:
    t, e = cfg.train, cfg.eval
    cap = t.max_completion_length or _task_cap(cfg)
    eval_cap = e.max_completion_length or cap
    every = e.every
    evals = 2 + ((t.steps - 1) // every if every else 0)
    per_rollout = t.minibatches * t.num_iterations
    return RowPlan(name, rows, math.ceil(t.steps / per_rollout), t.prompts_per_rollout, t.group_size,
                   min(expected, cap) if expected else cap, cap, evals, e.prompts, e.k,
                   min(expected, eval_cap) if expected else eval_cap, devices, e.final_prompts or e.prompts,
                   e.final_k or e.k,
                   cfg.spec.max_sampling_rounds if SAMPLING_MODES[cfg.spec.sampling].regenerates else 1,
                   _benchmark_tokens(e, expected))


def _benchmark_tokens(ev, expected: int | None) -> int:
    """Tokens of one evaluation's named benchmarks: size x n x L_benchmark each (docs/studies.md,
    "grpolab.studies.plan")."""
    total = 0
    for b in ev.benchmarks:
        size = b["size"] or (ev.final_prompts or ev.prompts if b["source"] == "held_out" else _file_rows(b))
        total += size * b["n"] * (min(expected, b["max_tokens"]) if expected else b["max_tokens"])
    return total


def _file_rows(bench: dict) -> int:
    """Rows of a benchmark file read whole (size 0); one still to be downloaded is not counted, said."""
    src = bench["source"]
    rows = locate_rows(src["path"], src.get("split"), src.get("config"), src.get("revision"), "eval.benchmarks")
    if not rows.available:
        plan_note(f"benchmark {bench['name']!r}: size 0 reads every row of {rows.where()}, which is not here yet: its "
                  "eval tokens are not counted (give its size)")
        return 0
    return len(read_rows(rows)[0])


def _task_cap(cfg) -> int:
    task = task_of(cfg.task)
    return task.max_completion_length


def _on_demand_line(plan: StudyPlan, tokens_per_second: float | None) -> str:
    """What the first batch of seeds costs and what the cap would: rows, tokens, GPU-hours."""
    batch, cap, max_rows = plan.on_demand

    def cost(seeds: int) -> str:
        share = seeds / plan.seeds
        text = f"{seeds} seeds = {round(plan.total_rows * share)} rows, {plan.total_tokens * share:,.0f} tokens"
        return text + (f", {plan.gpu_hours(tokens_per_second) * share:,.2f} GPU-hours" if tokens_per_second else "")
    bound = f"; no look past {max_rows} rows ({max_rows / len(plan.rows):.4g} seeds of every rung)" if max_rows else ""
    return (f"seeds on demand: first batch {cost(plan.seeds)}; then {batch} more per look until every rung is decided, "
            f"at most {cost(cap)}{bound}")


def render_plan(plan: StudyPlan, tokens_per_second: float | None = None) -> str:
    """The plan as text: one line per row shape, the totals, what the running machine needs."""
    shape = kind_named(plan.kind).plan_shape(plan)
    lines = [(f"plan of {plan.path}: {plan.kind} {plan.name!r}, {shape} = {plan.total_rows} rows "
              "(validated without loading a model)")]
    caps = sorted({r.cap for r in plan.rows})
    if plan.expected:
        lines.append(f"completion length assumed: {plan.expected:,} tokens per completion (plan.expected_completion_tokens; "
                     f"cap {', '.join(f'{c:,}' for c in caps)})")
    else:
        lines.append(f"completion length assumed: the cap, {', '.join(f'{c:,}' for c in caps)} tokens per completion "
                     "(an upper bound: declare plan.expected_completion_tokens for a mean)")
    devices = sorted({r.devices for r in plan.rows})
    lines.append(f"devices per row: {', '.join(map(str, devices))} ({plan.devices_source})")
    if tokens_per_second:
        lines.append(f"throughput: {tokens_per_second:,g} generated tokens/s per row on its devices (--tokens-per-second)")
    header = ("row", "rows", "rollouts", "prompts x G", "L", "train tokens", "evals", "eval tokens", "devices",
              "GPU-h/row")
    table = [header]
    for r in plan.rows:
        table.append((r.name, str(r.rows), f"{r.rollouts:,}", f"{r.prompts} x {r.group_size}", f"{r.completion_tokens:,}",
                      f"{r.train_tokens:,}" + (f" (up to x{r.dynamic_rounds})" if r.dynamic_rounds > 1 else ""),
                      str(r.evals), f"{r.eval_tokens:,}", str(r.devices),
                      f"{r.gpu_hours(tokens_per_second):,.2f}" if tokens_per_second else "-"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    total = f"total: {plan.total_rows} rows, {plan.total_tokens:,} generated tokens"
    if tokens_per_second:
        total += f", {plan.gpu_hours(tokens_per_second):,.2f} GPU-hours"
        dynamic = [r for r in plan.rows if r.dynamic_rounds > 1]
        if dynamic:
            extra = sum(r.rows * r.devices * r.train_tokens * (r.dynamic_rounds - 1) for r in dynamic) / tokens_per_second / 3600
            total += f" (dynamic sampling may add up to {extra:,.2f} more)"
    lines.append(total)
    if plan.on_demand:
        lines.append(_on_demand_line(plan, tokens_per_second))
    if not tokens_per_second:
        lines.append("GPU-hours: give --tokens-per-second X, one row's generated tokens per second on its devices; "
                     f"measure X on the machine that will run it: grpolab bench --what throughput {plan.path}")
    lines.extend(plan.notes)
    if plan.needs:
        lines.append("the machine that runs it needs:")
        lines.extend(f"  - {need}" for need in plan.needs)
    return "\n".join(lines)
