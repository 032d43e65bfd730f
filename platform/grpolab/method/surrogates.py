"""The surrogate axis as one registry: every value's facts, as data, in one entry.

An entry says what the surrogate reads (the ``MethodSpec`` fields it logs and that are inert under
any other surrogate), when it can act (on-policy, rho = 1, most surrogates train exactly the
unclipped policy gradient), how its clip is counted, and how stock TRL 1.16 names it. Its torch
function is attached by name one floor up (``grpolab.algorithms.surrogates``; a test checks one
function per entry and one entry per function). Everything else derives from here: the axis's
valid values (``spec.AXIS_CHOICES``), the requirements of the surrogate and its parameters
(``requirements``), the params a run logs (``tracking.naming``), TRL's loss types
(``trl_names``) and the GRPOConfig fields that set a surrogate's parameters (``trainer.trl_fields``).
Adding a surrogate: one entry here, its function in ``algorithms/surrogates.py``, and its test.
Pure data, no torch: validating an experiment imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from grpolab.method.params import Param, declare


@dataclass(frozen=True)
class TrlLoss:
    """One TRL 1.16 ``GRPOConfig.loss_type``: this surrogate with one aggregation (TRL's loss_type
    encodes both axes), plus any axis value the loss type fixes (cispo: no lower bound)."""
    loss_type: str
    aggregation: str
    meaning: str                               # for ``grpolab methods``
    fixed: dict = field(default_factory=dict)  # axis -> value the loss type implies


@dataclass(frozen=True)
class Surrogate:
    """One value of the surrogate axis. Formulas: the docstrings of its function in
    ``grpolab.algorithms.losses``."""
    name: str
    label: Callable[[object], str]  # MethodSpec -> how ``grpolab methods`` shows it, with its parameters
    params: dict[str, Param]       # the MethodSpec settings it reads; Param.off_policy: acts only off-policy
                                   # under this surrogate (one setting may differ between surrogates:
                                   # cov_fraction acts on-policy under clip_cov, not under kl_cov)
    on_policy: str | None          # why the surrogate is inert on-policy (needs rollout reuse); None: it acts
    clip: str | None = None        # "ppo": rho clipped to [1 - eps_low, 1 + eps_high] where A's sign says;
                                   # "dual": ppo plus the cap -c A for A < 0; "truncate": the IS weight
                                   # truncated whatever A's sign (CISPO); None: no clip, no clip fractions
    reference: bool = False        # needs the reference model even with kl_coef = 0
    own_ratio: str | None = None   # why it builds its own ratio (then ratio must be token)
    trl: tuple[TrlLoss, ...] = ()  # TRL's loss types for it
    trl_as: str | None = None      # TRL trains it as this surrogate's loss types plus its trl_fields
    trl_fields: dict[str, tuple[str, float]] = field(default_factory=dict)  # GRPOConfig field -> (axis, shift):
                                   # field = axis + shift under its loss types (cispo's bound is absolute)
    no_trl: str | None = None      # why TRL has no loss type for it (None when trl or trl_as says)
    pairwise: str | None = None    # how it pairs completions within a group (then a group filter must not leave
                                   # some unscored, and the whole rollout is one micro-batch); None: no pairs
    token_loss: bool = True        # a per-token loss (a sampler correction re-weights it); else one per sequence
    on_policy_only: str | None = None  # why rollout reuse is refused (it has no ratio to correct with); None: allowed


# a clip binds only off-policy (rho = 1 on-policy); eps_high's lower bound depends on the clip (spec.py)
_CLIP_BOUNDS = declare(Param("eps_low", "ratio clipped below at 1 - eps_low", low=0, high=1, off_policy=True),
                       Param("eps_high", "ratio clipped above at 1 + eps_high", off_policy=True))
_DUAL_CLIP_C = Param("dual_clip_c", "dual-clip cap: loss <= -A c when A < 0", low=1, low_open=True, off_policy=True)
_COV_FRACTION = Param("cov_fraction", "Clip-Cov / KL-Cov: fraction of tokens selected", low=0, high=1, low_open=True)
_SAPO = declare(Param("sapo_tau_pos", "SAPO gate temperature for A > 0", off_policy=True),
                Param("sapo_tau_neg", "SAPO gate temperature for A <= 0", off_policy=True))
_CLIP_COV = declare(_COV_FRACTION, Param("cov_low", "Clip-Cov: covariance window lower bound"),
                    Param("cov_high", "Clip-Cov: covariance window upper bound"))
_KL_COV = declare(_COV_FRACTION.reused(),
                  Param("kl_cov_coef", "KL-Cov: coefficient of |log ratio| on selected tokens", off_policy=True))
_DPO_BETA = Param("dpo_beta", "Group-DPO temperature", low=0, low_open=True)
_DRO_BETA = Param("dro_beta", "DRO: weight of the quadratic log-ratio penalty (beta/2) (log pi/pi_old)^2", low=0,
                  low_open=True, off_policy=True, late=True)
_VESPO = declare(*(Param(f"vespo_{k}_{sign}", f"VESPO gamma kernel {what} for A {'>=' if sign == 'pos' else '<'} 0",
                         low=0, low_open=k == "lambda", off_policy=True, late=True,
                         why="the kernel w^k exp(lambda (1 - w)) must vanish as w grows")
                   for sign in ("pos", "neg") for k, what in (("k", "exponent k"), ("lambda", "decay lambda"))))
_EPSILONS = {"epsilon": ("eps_low", 0.0), "epsilon_high": ("eps_high", 0.0)}
_RATIO_ONE = "on-policy the ratio is exactly 1 (eps_low/eps_high have no effect, clip fractions stay 0)"

_ENTRIES = (
    Surrogate("clip", lambda s: f"clip [{s.eps_low:g}, {s.eps_high:g}]", dict(_CLIP_BOUNDS), _RATIO_ONE, clip="ppo", trl_fields=dict(_EPSILONS), trl=(
        TrlLoss("grpo", "seq_mean_token_mean",
                "PPO clip; each completion's token mean, mean over completions (GRPO's length-normalised loss)"),
        TrlLoss("dapo", "token_mean",
                "PPO clip; mean over every token of the generation batch (DAPO's token-level loss only; grpolab's "
                "dapo is the paper's recipe: + Clip-Higher, overlong filter, soft overlong punishment, dynamic "
                "sampling)"),
        TrlLoss("dr_grpo", "seq_mean_token_sum_norm",
                "PPO clip; token sum / (completions x max_completion_length) (Dr. GRPO's constant normaliser)"),
        TrlLoss("bnpo", "token_mean_local", "PPO clip; mean over the tokens of the local micro-batch"),
        # LUSPO (2602.05261): PPO clip, each sequence's token sum (length-weighted), mean over sequences
        TrlLoss("luspo", "seq_mean_token_sum", "PPO clip; each completion's token sum, mean over completions (LUSPO)"),
    )),
    # TRL's delta caps rho for A < 0 inside its clip loss: dual-clip exactly when delta >= 1 + eps_high
    Surrogate("dual_clip", lambda s: f"dual-clip c={s.dual_clip_c:g}", {**_CLIP_BOUNDS, **declare(_DUAL_CLIP_C)},
              "on-policy rho = 1 and the cap -c*A never binds", clip="dual", trl_as="clip",
              trl_fields={**_EPSILONS, "delta": ("dual_clip_c", 0.0)}),
    # TRL's cispo truncates the IS weight above at epsilon_high (an absolute bound) and never below
    Surrogate("cispo", lambda s: f"IS weight clip [{1 - s.eps_low:g}, {1 + s.eps_high:g}]", dict(_CLIP_BOUNDS), "on-policy rho = 1: the truncation never binds", clip="truncate",
              trl_fields={"epsilon_high": ("eps_high", 1.0)}, trl=(
                  TrlLoss("cispo", "token_mean", "truncated, detached IS weight min(rho, epsilon_high) x A x log pi; "
                          "token-level (MiniMax-M1)", fixed={"eps_low": 1.0}),)),
    # d/drho [(4/tau) sigmoid(tau (rho - 1))] at rho = 1 is 4 sigmoid'(0) = 1 for every tau
    Surrogate("sapo", lambda s: f"soft gate tau {s.sapo_tau_pos:g}/{s.sapo_tau_neg:g}", dict(_SAPO),
              "on-policy the gate's slope at rho = 1 is 1 for every tau",
              trl_fields={"sapo_temperature_pos": ("sapo_tau_pos", 0.0), "sapo_temperature_neg": ("sapo_tau_neg", 0.0)},
              trl=(TrlLoss("sapo", "seq_mean_token_mean",
                           "soft gate (4/tau) sigmoid(tau (rho - 1)) instead of a clip; like grpo's aggregation (SAPO)"),)),
    Surrogate("reinforce", lambda s: "none (REINFORCE)", {}, None, no_trl="TRL 1.16 has no ratio-free loss type",
              on_policy_only="has no importance ratio"),
    # the selected tokens' gradient is cut also on-policy; the clip part binds only off-policy
    Surrogate("clip_cov", lambda s: f"Clip-Cov {s.cov_fraction:g}", {**_CLIP_BOUNDS, **_CLIP_COV}, None,
              clip="ppo", trl_fields=dict(_EPSILONS), no_trl="TRL 1.16 has no covariance-selected clip"),
    # its parameters choose and weigh a penalty on |log ratio|, which is 0 on-policy: inert there too
    Surrogate("kl_cov", lambda s: f"KL-Cov {s.cov_fraction:g}", dict(_KL_COV),
              "on-policy |log ratio| = 0 and its gradient too", no_trl="TRL 1.16 has no covariance-selected KL"),
    Surrogate("group_dpo", lambda s: f"DPO beta={s.dpo_beta:g}", declare(_DPO_BETA), None, reference=True,
              own_ratio="uses sequence log-probs directly",
              no_trl="a pairwise DPO loss on each group's best and worst completion, not a GRPOConfig loss type",
              pairwise="the DPO pair is chosen on every completion's reward", token_loss=False),
    # VESPO (2602.10693): a detached Gamma weight of the sequence ratio times -A log pi
    Surrogate("vespo", lambda s: f"VESPO k {s.vespo_k_pos:g}/{s.vespo_k_neg:g} lam {s.vespo_lambda_pos:g}/"
                                 f"{s.vespo_lambda_neg:g}", dict(_VESPO),
              "on-policy the sequence weight is 1 and phi(1) = 1 for every k, lambda",
              own_ratio="builds its own sequence weight from the token log-ratios (their sum, no length normalisation)",
              trl_fields={f"vespo_{k}": (f"vespo_{k}", 0.0) for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")},
              trl=(TrlLoss("vespo", "token_mean",
                           "detached Gamma weight of the sequence ratio x A x log pi; token-level (VESPO)"),)),
    # DPPO (2602.04879, verl 0.9.1's dppo_tv / dppo_kl): eps_low / eps_high bound the binary divergence
    # between pi and pi_old at the sampled token (verl's clip_ratio_low / high), dual_clip_c truncates the
    # detached IS weight (verl's clip_ratio_c); on-policy nothing is masked and the weight is 1
    *(Surrogate(f"dppo_{d}", lambda s, d=d: f"DPPO-{d.upper()} {s.eps_low:g}/{s.eps_high:g} c={s.dual_clip_c:g}",
                {**_CLIP_BOUNDS, **declare(_DUAL_CLIP_C)},
                "on-policy pi = pi_old: no token's divergence exceeds its bound and the truncated ratio is 1",
                own_ratio="masks tokens by their own token-level divergence from pi_old",
                no_trl="TRL 1.16.0 has no DPPO loss type (no experimental DPPO trainer either)") for d in ("tv", "kl")),
    # verl 0.9.1's dro: the penalty (beta/2) (log pi - log pi_old)^2 and its gradient are 0 on-policy
    Surrogate("dro", lambda s: f"DRO beta={s.dro_beta:g}", declare(_DRO_BETA),
              "on-policy log pi - log pi_old = 0: the quadratic penalty and its gradient vanish",
              own_ratio="penalises the token log-ratio itself, with no ratio in its policy term",
              no_trl="TRL 1.16 has no quadratic log-ratio penalty"),
)
SURROGATES: dict[str, Surrogate] = {s.name: s for s in _ENTRIES}
CLIP = "clip"   # the plain PPO clip: what a ratio that brings its own clipped loss is combined with


SURROGATE_PARAMS: tuple[str, ...] = tuple(dict.fromkeys(p for s in _ENTRIES for p in s.params))


def trl_target(surrogate: str, trl_field: str) -> str | None:
    """The surrogate that GRPOConfig field ``trl_field`` (set) means under ``surrogate``'s TRL loss
    types: ``surrogate`` itself when it reads the field, else the surrogate TRL trains as
    ``surrogate`` plus that field (delta on a clip loss: dual_clip); None when TRL ignores it there."""
    if trl_field in SURROGATES[surrogate].trl_fields:
        return surrogate
    return next((s.name for s in _ENTRIES if s.trl_as == surrogate and trl_field in s.trl_fields), None)
