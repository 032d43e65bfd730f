"""A ladder table's caption, laid out for a reader who scans: the design in a line or two, the
pre-registration status on one line, then the dated deviations and how to read each column as
lists (openable ``<details>`` sections on the dashboard, lists after the printed table). Every
output shows every deviation: a study changed after its results were seen says so wherever its
verdicts appear."""

from __future__ import annotations

import html
from pathlib import Path
from typing import NamedTuple

from grpolab.analysis.compute_hours import HOURS_NOTE
from grpolab.studies.definition import StudyConfig, load_study
from grpolab.studies.registration import Deviation, ladder_fields, ladder_key, status


class LadderCaption(NamedTuple):
    design: str                        # one or two lines: study, metric, seeds, intervals, smallest effect
    registration: str                  # pre-registration status, and the sequential plan's note
    deviations: tuple[Deviation, ...]  # dated, one per change made after results were seen
    columns: tuple[str, ...]           # how to read the table's columns

    def deviation_lines(self) -> list[str]:
        """'YYYY-MM-DD: change (after seeing ...)' per deviation, or ['none']."""
        return [d.text() for d in self.deviations] or ["none"]


def seed_ranges(seeds) -> str:
    """'100-163' or '0-4, 7, 9-10': the seeds as runs of consecutive integers."""
    runs: list[list[int]] = []
    for s in sorted(int(s) for s in seeds):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def looks_text(cfg: StudyConfig, plan: tuple[int, ...]) -> str:
    """Under a sequential plan, its looks (look j: the first n_j seeds of the list) and which seeds
    each rung is judged on; '' without one."""
    if not plan:
        return ""
    bounds = [0, *plan]
    added = [f"look {j} {'seeds' if j == 1 else 'adds'} {seed_ranges(cfg.seeds[bounds[j - 1]:n])}"
             for j, n in enumerate(plan, 1) if n <= len(cfg.seeds)]
    return (f"looks planned at {', '.join(str(n) for n in plan)} seeds: {', '.join(added)}; each rung judged on "
            "the largest look complete for both rungs of its pair; rows beyond it are counted in n and mean, not judged")


def column_notes(cfg: StudyConfig, level: float, plan: tuple[int, ...]) -> tuple[str, ...]:
    """What each column of the ladder table means, one note per column (family)."""
    per_look = "" if level == 0.95 else "; the per-look level of seeds added until decided"
    notes = [f"verdict_vs_prev: each rung against the previous one on paired seeds, {100 * level:.4g}% paired "
             f"t-interval of the difference (delta_ci95 its half-width{per_look}); labels: docs/studies.md",
             "family: the judged rungs of this table; tests: each rung's H0 (mean 0) p with Holm's adjustment "
             "over the family",
             "familywise: the label on the Bonferroni interval at 1 - 0.05/(rungs x looks), all of which hold "
             "together with probability >= 95%",
             "censored: threshold metrics never reached count at the budget (a lower bound) and make a rung's "
             "label inconclusive",
             "precondition: a floor showing the change can act at all",
             HOURS_NOTE,
             "regime: the gates on the premise the rung's mechanism needs, measured on the previous rung's rows "
             "(failed: 'regime absent: not a test of the claim')",
             "*fragile*: a deciding bound within 2 x the evaluation noise sd sqrt(2 p (1 - p) / (prompts x samples "
             "x pairs)) of its boundary (a fresh evaluation draw crosses it with probability > 2.3 %), the "
             "familywise label checked on its own interval"]
    if cfg.seed_rungs:
        notes.insert(0, "n: the seeds each rung ran; pairs: the paired seeds of its difference")
    if plan:
        notes.insert(0, f"seeds: {looks_text(cfg, plan)}")
    return tuple(notes)


def ladder_caption(cfg: StudyConfig, objective: int, state: Path | None, level: float = 0.95,
                   study=None) -> LadderCaption:
    """What the ladder table states (every output of a ladder's verdicts carries it): the design,
    its pre-registration status, the deviations and the column notes."""
    from grpolab.studies.storage import plan_looks, sequential_note
    obj = cfg.objectives[objective]
    plan = plan_looks(study) if study is not None else ()
    delta = f"{obj.smallest_effect:g}" if obj.smallest_effect is not None else "not set (no verdicts)"
    design = (f"{cfg.name}: {obj.metric} ({obj.direction}), mean over seeds {seed_ranges(cfg.seeds)} with 95% "
              f"t-interval; each rung judged against the previous one on paired seeds ({100 * level:.4g}% paired "
              f"t-interval), smallest effect that matters {delta}"
              + (f"; published: {cfg.published_source}" if cfg.published_source else "")
              + f"; {base_model_text(cfg.base)}")
    registration = []
    if state is not None:
        file_cfg = load_study(cfg.path)   # registered as written, without seeds added on demand
        registration.append(status(state, ladder_key(file_cfg), ladder_fields(file_cfg), cfg.deviations))
    if study is not None and sequential_note(study):
        registration.append(sequential_note(study))
    return LadderCaption(design, "; ".join(registration), tuple(cfg.deviations), column_notes(cfg, level, plan))


def base_model_text(base: dict) -> str:
    """The model every row starts from: shipped files with their sha256 (the same on every machine),
    or a warm start that each machine trains for itself."""
    model = base.get("model") or {}
    warm = base.get("warm_start") or {}
    if model.get("path"):
        digest = f" (sha256 {model['sha256']})" if model.get("sha256") else " (no sha256 declared)"
        return f"base model: {model['path']}{digest}"
    if warm.get("enabled", True) is False:
        return f"base model: {model.get('preset', 'tiny')} preset, randomly initialised per seed"
    if warm.get("seed", -1) >= 0:
        return (f"base model: the warm start of seed {warm['seed']} ({model.get('preset', 'tiny')} preset), trained "
                "on each machine (its kernels decide its weights)")
    return f"base model: each seed's own warm start ({model.get('preset', 'tiny')} preset)"


def caption_head(caption: LadderCaption) -> str:
    """The one or two lines above a printed table: the design and the registration status."""
    return caption.design + (f"\nregistration: {caption.registration}" if caption.registration else "")


def caption_lists(caption: LadderCaption) -> str:
    """The markdown after a printed table: the dated deviations, then the column notes."""
    return ("deviations:\n" + "\n".join(f"- {line}" for line in caption.deviation_lines())
            + "\n\ncolumns:\n" + "\n".join(f"- {note}" for note in caption.columns))


def latex_lists(caption: LadderCaption, escape) -> str:
    """The same lists as LaTeX itemize environments after the table (``escape``: text-mode escaping)."""
    def items(lines):
        return "\\begin{itemize}\n" + "".join(f"\\item {escape(line)}\n" for line in lines) + "\\end{itemize}\n"
    return (f"\n\\noindent Deviations:\n{items(caption.deviation_lines())}"
            f"\\noindent Columns:\n{items(caption.columns)}")


def caption_html(caption: LadderCaption) -> tuple[str, str]:
    """(above the table, below it) on the dashboard: the design and registration as short
    paragraphs; the dated deviations and the column notes as sections the reader can open, the
    deviations' summary counting them so a closed section still says there are some."""
    above = f"<p>{html.escape(caption.design)}</p>" + (
        f"<p>registration: {html.escape(caption.registration)}</p>" if caption.registration else "")
    n = len(caption.deviations)
    summary = f"Deviations: {n} change{'s' if n != 1 else ''} made after results were seen" if n else "Deviations: none"
    dated = "".join(f"<li><time>{html.escape(d.date)}</time>: {html.escape(d.change)} "
                    f"(after seeing {html.escape(d.after_seeing)})</li>" for d in caption.deviations)
    below = (f'<details class="deviations"><summary>{summary}</summary>'
             + (f"<ol>{dated}</ol>" if dated else "<p>none declared</p>") + "</details>"
             + "<details><summary>Reading the columns</summary><ul>"
             + "".join(f"<li>{html.escape(note)}</li>" for note in caption.columns) + "</ul></details>")
    return above, below
