"""The settings of the sampling modes as registries: what a group filter keeps a group on
(``sampling_filter``), what dynamic sampling does at its round cap (``sampling_cap_policy``), and
what GFPO retains a completion by (``gfpo_metric``).

Each value is one entry: its rule (the formula, where there is one), its source, what the run must
have for it to act as said (``needs``; None: nothing beyond a sampling mode that reads it, which
``sampling_modes`` names and ``requirements`` checks), and why stock TRL 1.16 has no such setting
(it samples each batch once and trains every completion). The setting is logged under the modes
that read it (``tracking.naming``). The function a value selects is attached by name one floor up
(``grpolab.algorithms.sampling_options``; a test checks one function per entry and one entry per
function) and read by the trainer's hooks (``grpolab.trainer.sampling``).
Adding a value: one entry here, its function, and its test. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingOption:
    """One value of ``sampling_filter``, ``sampling_cap_policy`` or ``gfpo_metric``.
    Formula: the docstring of its function in ``grpolab.algorithms.sampling_options``."""
    name: str
    rule: str
    source: str
    needs: str | None = None          # what the run must have for it to act as said (None: nothing more)
    no_trl: str = ""                  # why TRL 1.16 has no such setting


_DAPO = "Yu et al. 2025, DAPO, arXiv:2503.14476"
_GFPO = ("Shrivastava et al. 2025, Sample More to Think Less: Group Filtered Policy Optimization for Concise "
         "Reasoning, arXiv:2508.09726")
_NO_TRL_FILTER = "TRL 1.16 trains every generated group"
_NO_TRL_CAP = "TRL 1.16 generates each batch once: it has no round cap"
_NO_TRL_GFPO = "TRL 1.16.0 ships no GFPO trainer"
ACCURACY = "accuracy"   # the filter that reads correctness: without it the drop-in keeps groups on REWARD
REWARD = "reward"

SAMPLING_FILTERS: dict[str, SamplingOption] = {o.name: o for o in (
    SamplingOption(ACCURACY, "keep a group when 0 < #correct < G (verifier correctness)", f"{_DAPO}, eq. 11",
                   needs="correctness (a task's verifier; GrpoLabTrainer(correctness=...))", no_trl=_NO_TRL_FILTER),
    SamplingOption(REWARD, "keep a group when its total shaped reward varies",
                   "verl, DAPO recipe (algorithm.filter_groups.metric)", no_trl=_NO_TRL_FILTER),
)}
CAP_POLICIES: dict[str, SamplingOption] = {o.name: o for o in (
    SamplingOption("fill", "top the batch up with the remaining groups of largest reward std (the least "
                           "degenerate), with a warning", f"{_DAPO}; verl's max_num_gen_batches", no_trl=_NO_TRL_CAP),
    SamplingOption("fail", "stop the run (SamplingCapError) naming the informative groups found and needed",
                   f"{_DAPO} (the batch must hold informative groups only)", no_trl=_NO_TRL_CAP),
)}
GFPO_METRICS: dict[str, SamplingOption] = {o.name: o for o in (
    SamplingOption("length", "retain the gfpo_keep shortest |o_i| of each group", f"{_GFPO} (length)",
                   no_trl=_NO_TRL_GFPO),
    SamplingOption("token_efficiency", "retain the gfpo_keep largest r_i / |o_i| of each group",
                   f"{_GFPO} (token efficiency)", no_trl=_NO_TRL_GFPO),
)}
# MethodSpec field -> its registry
SAMPLING_OPTIONS: dict[str, dict[str, SamplingOption]] = {
    "sampling_filter": SAMPLING_FILTERS, "sampling_cap_policy": CAP_POLICIES, "gfpo_metric": GFPO_METRICS}
