"""The method registry rendered as a table of methods by axes (generated from the code)."""

from __future__ import annotations

import textwrap

import pandas as pd

from grpolab.method.aggregations import AGGREGATIONS
from grpolab.method.entropy_modes import ENTROPY_MODES
from grpolab.method.episode_norms import EPISODE_NORMS
from grpolab.method.kl import KL_ESTIMATORS, KL_PLACEMENTS
from grpolab.method.ratios import RATIOS
from grpolab.method.registry import METHODS
from grpolab.method.sampler_corrections import SAMPLER_CORRECTIONS, trl_names
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.method.sampling_options import SAMPLING_OPTIONS
from grpolab.method.surrogates import SURROGATES
from grpolab.method.trl_names import TRL_LOSS_MEANING, TRL_LOSS_TYPES, format_recipe, trl_recipe


def _describe(method) -> dict:
    row = {"method": method.key, "title": method.title}
    if method.missing:
        return {**row, "status": f"not yet: {method.missing}", "citation": method.citation}
    s = method.spec()
    clip = SURROGATES[s.surrogate].label(s)
    kl = "off" if s.kl_coef == 0 else f"{s.kl_estimator} {s.kl_coef:g} in {s.kl_placement}"
    length = ", ".join(x for x, on in (("overlong filter", s.overlong_filter), ("soft punish", s.soft_overlong)) if on) or "-"
    regime = ", ".join(f"{k}={v}" for k, v in method.regime.items()) or "-"
    advantage = s.advantage + (f" + {s.step_omega:g} x anchor steps" if s.step_omega else "")   # GiGPO
    return {**row, "status": "runs", "advantage": advantage, "ratio": s.ratio, "surrogate": clip,
            "aggregation": s.aggregation, "KL": kl, "sampling": s.sampling, "length": length,
            "regime": regime, "spec": s.spec_hash(), "citation": method.citation, "TRL": _trl(s)}


def _trl(spec) -> str:
    """The GRPOConfig under which stock TRL trains this exact update rule, or empty."""
    recipe = trl_recipe(spec)
    return "" if recipe is None else f"GRPOConfig({format_recipe(recipe)})"


def methods_frame() -> pd.DataFrame:
    return pd.DataFrame([_describe(m) for m in METHODS.values()]).fillna("")


WIDTH = 110
UPDATE_RULE = ["method", "advantage", "ratio", "surrogate", "aggregation"]
REGULARISERS = ["method", "KL", "sampling", "length", "regime"]


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent="  ", subsequent_indent="      ")


def methods_table(markdown: bool = False) -> str:
    """Markdown: one wide table (for docs). Plain text: fits ~110 columns: the update rule, then
    KL / sampling / length / regime, then each method's title, citation and spec hash."""
    frame = methods_frame()
    if markdown:
        return frame.to_markdown(index=False)
    runs = frame[frame.status == "runs"]
    left = lambda part: part.to_string(index=False, justify="left", formatters={  # noqa: E731
        c: (lambda v, w=int(part[c].str.len().max()): f"{v:<{w}}") for c in part.columns})
    lines = ["Update rule", left(runs[UPDATE_RULE]), "", "KL, sampling, length, regime", left(runs[REGULARISERS]),
             "", "Sources"]
    for row in frame.itertuples():
        status = "" if row.status == "runs" else f" [{row.status}]"
        lines.extend(textwrap.wrap(f"{row.method} ({row.title}): {row.citation}{status}", width=WIDTH,
                                   initial_indent="  ", subsequent_indent="      "))
    lines.extend(["", "Aggregations (method.aggregation; TRL's loss_type with the PPO clip)"])
    for a in AGGREGATIONS.values():
        trl = f"TRL loss_type={a.trl!r}" if a.trl else f"no TRL loss type: {a.no_trl}"
        lines.extend(textwrap.wrap(f"{a.name}: {a.formula}; {a.source}; {trl}", width=WIDTH, initial_indent="  ",
                                   subsequent_indent="      "))
    lines.extend(["", "Ratios (method.ratio; TRL's importance_sampling_level)"])
    for r in RATIOS.values():
        trl = f"TRL importance_sampling_level={r.trl!r}" if r.trl else f"no TRL level: {r.no_trl}"
        lines.extend(_wrapped(f"{r.name}: {r.formula}; {r.source}; {trl}"))
    lines.extend(["", "KL (method.kl_estimator, method.kl_placement; TRL's beta is k3 in the loss)"])
    for k in (*KL_ESTIMATORS.values(), *KL_PLACEMENTS.values()):
        lines.extend(_wrapped(f"{k.name}: {k.formula}; {k.source}" + (f"; {k.no_trl}" if k.no_trl else "")))
    lines.extend(["", "Sampling (method.sampling, its settings), episodes (method.episode_norm), entropy "
                      "(method.entropy_mode)"])
    described = ([("sampling", m, m.label) for m in SAMPLING_MODES.values()]
                 + [(axis, o, o.rule) for axis, options in SAMPLING_OPTIONS.items() for o in options.values()]
                 + [("episode_norm", n, n.formula) for n in EPISODE_NORMS.values()]
                 + [("entropy_mode", m, m.rule) for m in ENTROPY_MODES.values()])
    for axis, m, what in described:
        lines.extend(_wrapped(f"{axis}={m.name}: {what}; {m.source}" + (f"; {m.no_trl}" if m.no_trl else "")))
    lines.extend(["", "vLLM sampler corrections (generation.is_correction; TRL's vllm_importance_sampling_*)"])
    for c in SAMPLER_CORRECTIONS.values():
        lines.extend(_wrapped(f"{c.name}: {c.formula}; {c.source}; TRL {format_recipe(trl_names(c.name))}"))
    lines.extend(["", "TRL's loss_type names (GrpoLabTrainer without method= trains the GRPOConfig as these axes)"])
    for name, axes in TRL_LOSS_TYPES.items():
        text = f"{name}: {', '.join(f'{k}={v}' for k, v in axes.items())}: {TRL_LOSS_MEANING[name]}"
        lines.extend(textwrap.wrap(text, width=WIDTH, initial_indent="  ", subsequent_indent="      "))
    lines.extend(["", "Registered methods stock TRL trains exactly (both names of one update rule; rollout reuse aside)"])
    for row in runs[runs.TRL != ""].itertuples():
        lines.extend(textwrap.wrap(f"{row.method} = {row.TRL}", width=WIDTH, initial_indent="  ",
                                   subsequent_indent="      "))
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())


