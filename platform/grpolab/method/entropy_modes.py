"""The entropy-bonus axis as one registry: how the coefficient of the entropy bonus moves.

An entry says its rule and source, what it reads (the adaptive controllers' target, step and
bounds: logged and inert under the static bonus), whether it acts from a zero start coefficient,
and how stock TRL 1.16 names it. The controller that applies the facts is one floor up
(``grpolab.trainer.entropy_control.EntropyController``); the axis's valid values
(``spec.AXIS_CHOICES``), its requirement (``requirements``), its logged params (``tracking.naming``)
and TRL's settings (``trl_names``, ``trainer.trl_settings``, ``trainer.trl_fields``) derive from here.
Adding a mode: one entry here, its rule in the controller, and its test. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpolab.method.params import Param, declare

# the controller's bounds: 0 <= min <= max (the order of the two: spec.py)
ADAPTIVE = declare(Param("entropy_target", "adaptive: raise the coefficient while entropy is below"),
                   Param("entropy_coef_step", "adaptive: change of the coefficient per optimizer step"),
                   Param("entropy_coef_min", "adaptive: the coefficient never goes below (TRL's entropy_coef_min)", low=0,
                         late=True),
                   Param("entropy_coef_max", "adaptive: nor above (TRL's entropy_coef_max)", low=0, late=True))
ADAPTIVE_PARAMS = tuple(ADAPTIVE)


@dataclass(frozen=True)
class EntropyMode:
    """One value of ``entropy_mode``. The rule: ``EntropyController``'s docstring."""
    name: str
    rule: str
    source: str
    params: dict[str, Param] = field(default_factory=dict)  # settings only it reads (logged, inert under the others)
    adaptive: bool = False            # the coefficient moves once per optimizer step toward entropy_target
    gated: bool = False               # moves while H <= target, applies the bonus only while the last step's
                                      # H <= target: acts from a zero start coefficient
    trl: dict | None = None           # GRPOConfig settings under which TRL 1.16 applies exactly it
    no_trl: str | None = None


_ENTRIES = (
    EntropyMode("static", "coef = entropy_coef throughout", "Williams & Peng 1991; TRL 1.16 GRPOConfig.entropy_coef",
                trl={"use_adaptive_entropy": False}),
    EntropyMode("adaptive", "coef += step while H < target, else -= step, within [min, max]",
                "He et al. 2025, Skywork Open Reasoner 1 Technical Report, arXiv:2505.22312 (adaptive entropy "
                "control), without TRL's gate", params=ADAPTIVE, adaptive=True,
                no_trl="TRL 1.16's controller always gates the bonus (adaptive_gated)"),
    EntropyMode("adaptive_gated", "coef += step while H <= target, else -= step; the bonus only while H <= target",
                "He et al. 2025, Skywork Open Reasoner 1 Technical Report, arXiv:2505.22312; TRL 1.16 "
                "GRPOConfig.use_adaptive_entropy", params=ADAPTIVE, adaptive=True, gated=True,
                trl={"use_adaptive_entropy": True}),
)
ENTROPY_MODES: dict[str, EntropyMode] = {m.name: m for m in _ENTRIES}


def entropy_modes(**facts) -> tuple[str, ...]:
    """The modes whose entries have every given fact, e.g. ``entropy_modes(adaptive=True)``."""
    return tuple(m.name for m in ENTROPY_MODES.values() if all(getattr(m, k) == v for k, v in facts.items()))


def trl_entropy_mode(use_adaptive_entropy: bool) -> str:
    """The mode TRL 1.16 applies under ``GRPOConfig.use_adaptive_entropy``."""
    return next(m.name for m in ENTROPY_MODES.values() if m.trl == {"use_adaptive_entropy": bool(use_adaptive_entropy)})


def entropy_mode_acts(spec) -> bool:
    """Whether the run has an entropy bonus whose mode matters (a start coefficient, or a gated mode)."""
    return spec.entropy_coef > 0 or ENTROPY_MODES[spec.entropy_mode].gated

