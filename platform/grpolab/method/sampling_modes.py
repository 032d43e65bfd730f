"""The sampling axis as one registry: how a generation batch becomes the trained batch.

An entry says its source, what it reads (its own ``MethodSpec`` fields, logged and inert under the
other values; ``sampling_filter`` for the values that keep or drop whole groups), what it does to
the batch (generates more rounds, drops rows from the loss, retains part of each group in the
baselines), how it meets the rest of the spec, what it does with a group whose rewards are all
equal (said when an update gives no gradient) and whether stock TRL 1.16 samples that way. The
trainer's hooks for each fact are in ``grpolab.trainer.group_sampling`` (dynamic rounds, the
zero-variance filter, GFPO's retention); the axis's valid values (``spec.AXIS_CHOICES``), its
requirements (``requirements``) and its logged params (``tracking.naming``) derive from here.
Adding a sampling mode: one entry here, its hook in the trainer, and its test. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpolab.method.params import Param, declare


@dataclass(frozen=True)
class SamplingMode:
    """One value of the sampling axis."""
    name: str
    label: str                        # what it is, in words (requirements and warnings)
    source: str
    params: dict[str, Param] = field(default_factory=dict)  # settings only it reads (logged, inert under the
                                      # others); a mode that filters_groups reads FILTER too
    filters_groups: bool = False      # keeps or drops whole groups on method.sampling_filter (reads it)
    regenerates: bool = False         # generates more rounds until enough groups vary (max_sampling_rounds)
    drops_rows: bool = False          # leaves completions out of the loss after generation: the token normaliser
                                      # must not count them (a token-level aggregation)
    retains: bool = False             # keeps a subset of each group in the baselines; the rest have no reward
    on_flat_groups: str = ""          # what it does with groups of equal rewards ({field} reads the spec)
    trl: bool = False                 # stock TRL 1.16's GRPOTrainer samples this way
    no_trl: str | None = None         # why TRL has none (None when ``trl``)
    multi_turn: str | None = None     # why it cannot run on multi-turn episodes (None: it can)

    @property
    def drops_flat_groups(self) -> bool:
        """Drops the groups its filter rejects without generating more (the zero-variance filter)."""
        return self.filters_groups and not self.regenerates

    @property
    def trains_every_row(self) -> bool:
        """Every generated completion is in the trained batch."""
        return not (self.filters_groups or self.drops_rows)


# logged wherever it is away from its default, also under a mode that reads no filter: the run states
# which groups it would keep
FILTER = declare(Param("sampling_filter", "dynamic / zero-variance filter keeps groups whose accuracy (DAPO) or "
                                          "reward (verl) varies",
                       log="changed"))
_EPISODES = "it selects among the trainer's own generated groups; episodes run through TRL's rollout_func"
_ENTRIES = (
    SamplingMode("static", "static sampling", "Shao et al. 2024, GRPO, arXiv:2402.03300",
                 on_flat_groups="trains them as they come", trl=True),
    SamplingMode("dynamic", "dynamic sampling", "Yu et al. 2025, DAPO, arXiv:2503.14476 (dynamic sampling)",
                 params=declare(Param("max_sampling_rounds", "dynamic sampling: generation rounds per batch at most", low=1),
                                Param("sampling_cap_policy", "at the cap: fill with least degenerate groups (warn) "
                                                             "| fail"), *FILTER.values()),
                 filters_groups=True, regenerates=True,
                 on_flat_groups="hit its round cap (max_sampling_rounds={max_sampling_rounds}) and filled the batch "
                                "with them",
                 no_trl="TRL 1.16 generates each batch once", multi_turn=_EPISODES),
    SamplingMode("zero_variance_filter", "zero-variance filtering",
                 "Yu et al. 2025, DAPO, arXiv:2503.14476 (its filter, without generating more groups)",
                 params=dict(FILTER), filters_groups=True, drops_rows=True,
                 no_trl="TRL 1.16 trains every generated group",
                 multi_turn=_EPISODES),
    SamplingMode("gfpo", "GFPO's group filter",
                 "Shrivastava et al. 2025, Sample More to Think Less: Group Filtered Policy Optimization for "
                 "Concise Reasoning, arXiv:2508.09726",
                 params=declare(Param("gfpo_keep", "GFPO: completions retained per group (of train.group_size sampled)",
                                      low=2, why="one retained completion is its own baseline: A = 0 for every "
                                                 "estimator, nothing trains", late=True),
                                Param("gfpo_metric", "GFPO: retain the shortest (length) or the largest reward / length",
                                      late=True)),
                 drops_rows=True, retains=True,
                 on_flat_groups="trains the retained completions as they come",
                 no_trl="TRL 1.16.0 ships no GFPO trainer", multi_turn=_EPISODES),
)
SAMPLING_MODES: dict[str, SamplingMode] = {m.name: m for m in _ENTRIES}
FILTER_PARAMS = tuple(FILTER)   # read by every mode that ``filters_groups``


def sampling_modes(**facts) -> tuple[str, ...]:
    """The modes whose entries have every given fact, e.g. ``sampling_modes(filters_groups=True)``."""
    return tuple(m.name for m in SAMPLING_MODES.values() if all(getattr(m, k) == v for k, v in facts.items()))


def readers(param: str) -> tuple[str, ...]:
    """The modes that read MethodSpec field ``param``."""
    return tuple(m.name for m in SAMPLING_MODES.values() if param in m.params)


def sampling_params() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for m in SAMPLING_MODES.values() for p in m.params))


def on_flat_groups(spec) -> str:
    """``method.sampling=<mode>`` and what it does with groups of equal rewards."""
    said = SAMPLING_MODES[spec.sampling].on_flat_groups.format(**spec.to_dict())
    return f"method.sampling={spec.sampling}" + (f" {said}" if said else "")
