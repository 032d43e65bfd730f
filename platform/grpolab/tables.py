"""The method registry rendered as a table of methods by axes (generated from the code)."""

from __future__ import annotations

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
    return {**row, "status": "runs", "advantage": s.advantage, "ratio": s.ratio, "surrogate": clip,
            "aggregation": s.aggregation, "KL": kl, "sampling": s.sampling, "length": length,
            "regime": regime, "spec": s.spec_hash(), "citation": method.citation}


def methods_frame() -> pd.DataFrame:
    return pd.DataFrame([_describe(m) for m in METHODS.values()]).fillna("")


def methods_table(markdown: bool = False) -> str:
    frame = methods_frame()
    if markdown:
        return frame.to_markdown(index=False)
    return frame.drop(columns=["citation"]).to_string(index=False)
