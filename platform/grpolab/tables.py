"""The method registry rendered as a table of methods by axes (generated from the code)."""

from __future__ import annotations

import textwrap

import pandas as pd

from .methods import METHODS


def _describe(method) -> dict:
    row = {"method": method.key, "title": method.title}
    if method.missing:
        return {**row, "status": f"not yet: {method.missing}", "citation": method.citation}
    s = method.spec()
    clip = {"clip": f"clip [{s.eps_low:g}, {s.eps_high:g}]", "dual_clip": f"dual-clip c={s.dual_clip_c:g}",
            "cispo": f"IS weight clip [{1 - s.eps_low:g}, {1 + s.eps_high:g}]", "sapo": f"soft gate tau {s.sapo_tau_pos:g}/{s.sapo_tau_neg:g}",
            "clip_cov": f"Clip-Cov {s.cov_fraction:g}", "kl_cov": f"KL-Cov {s.cov_fraction:g}",
            "reinforce": "none (REINFORCE)", "group_dpo": f"DPO beta={s.dpo_beta:g}"}[s.surrogate]
    kl = "off" if s.kl_coef == 0 else f"{s.kl_estimator} {s.kl_coef:g} in {s.kl_placement}"
    length = ", ".join(x for x, on in (("overlong filter", s.overlong_filter), ("soft punish", s.soft_overlong)) if on) or "-"
    regime = ", ".join(f"{k}={v}" for k, v in method.regime.items()) or "-"
    advantage = s.advantage + (f" + {s.step_omega:g} x anchor steps" if s.step_omega else "")   # GiGPO
    return {**row, "status": "runs", "advantage": advantage, "ratio": s.ratio, "surrogate": clip,
            "aggregation": s.aggregation, "KL": kl, "sampling": s.sampling, "length": length,
            "regime": regime, "spec": s.spec_hash(), "citation": method.citation}


def methods_frame() -> pd.DataFrame:
    return pd.DataFrame([_describe(m) for m in METHODS.values()]).fillna("")


WIDTH = 110
UPDATE_RULE = ["method", "advantage", "ratio", "surrogate", "aggregation"]
REGULARISERS = ["method", "KL", "sampling", "length", "regime"]


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
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())


def latex_table(frame: pd.DataFrame, caption: str = "", float_format: str = "{:.3g}") -> str:
    """A booktabs LaTeX table (``\\usepackage{booktabs}``). Cells and column names are escaped
    (``%``, ``_``, ``&``, ``#`` ...); NaN is ``--``; the caption is escaped the same way."""
    return frame.to_latex(index=False, escape=True, na_rep="--", float_format=float_format.format,
                          caption=escape_latex(caption) if caption else None)


LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape_latex(text: str) -> str:
    """Text mode escaping (pandas escapes cells itself, not the caption)."""
    return "".join(LATEX_SPECIALS.get(ch, ch) for ch in text)
