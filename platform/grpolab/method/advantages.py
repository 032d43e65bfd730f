"""The advantage axis as one registry: every estimator's facts, as data, in one entry.

An entry says what the estimator reads (the ``MethodSpec`` fields it logs and that are inert under
any other estimator), the shape of what it returns (one advantage per completion, or one per
token), how it meets the run's other settings (a reward-side KL, NaN rewards, several reward
components, multi-turn episodes, GiGPO's step-level term) and how stock TRL 1.16 names it. Its
torch function is attached by name one floor up (``grpolab.algorithms.estimators``; a test
checks one function per entry and one entry per function). Everything else derives from here: the
axis's valid values (``spec.AXIS_CHOICES``), the requirements of its parameters (``requirements``),
the params a run logs (``tracking.naming``), TRL's settings (``trl_names``, ``trainer.trl_settings``,
``trainer.trl_fields``) and the trainer's and tasks' checks.
Adding an estimator: one entry here, its function, and its test. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpolab.method.params import Param, declare


@dataclass(frozen=True)
class Estimator:
    """One value of the advantage axis. Formulas: the docstring of its function."""
    name: str
    params: dict[str, Param] = field(default_factory=dict)  # settings only it reads (logged, inert under the others)
    reads: dict[str, Param] = field(default_factory=dict)   # shared settings it reads (SHARED: logged where not
                                      # default, inert under the estimators that do not read them)
    per_token: bool = False           # returns (N, T), one advantage per token; else (N,), one per completion
    kl_per_token: bool = False        # folds a reward-side KL in per token (else the KL is summed per sequence
                                      # and subtracted from the completion's reward)
    kl_reward_only: bool = False      # with kl_coef > 0 the KL must sit in the reward (it folds it in)
    no_reward_kl: str | None = None   # why a reward-side KL is refused (None: allowed)
    unscorable: bool = False          # leaves NaN (unscorable) rewards out of its baseline, as TRL does
    components: bool = False          # keeps reward components apart: needs a task with >= 2 of them
    bounded: str | None = None        # why it needs rewards in [0, 1] (None: any reward)
    critic: bool = False              # needs a learned value model (its advantages come from the trainer's critic)
    tracker: bool = False             # keeps per-prompt state across batches (a ValueTracker)
    step_norm: str | None = None      # GiGPO's step-level term normalised like it: "std" | "mean" (None: no step term)
    multi_turn: str | None = None     # why it cannot run on multi-turn episodes (None: it can)
    trl: dict | None = None           # GRPOConfig settings under which TRL 1.16 computes exactly it
    no_trl: str | None = None         # why TRL has none (None when ``trl`` is set)
    missing: str | None = None        # why grpolab cannot train with it yet (its function exists and is tested)
    inputs: tuple[str, ...] = ()      # what it reads beyond the rewards that the trainer computes only for the
                                      # estimators that ask, each from its provider (trainer/estimator_inputs.py):
                                      # "greedy_rewards" (one greedy completion per prompt, scored: ReMax),
                                      # "pi_old_token_stats" (log pi_old and sum_v pi_old(v)^2 at every token),
                                      # "critic_values" (the critic's V(s_t) at generation: GAE)
    over_generated_tokens: bool = False   # its token baselines are over every generated model token (truncated
                                      # rows included, as verl's); the loss still applies the trained mask
    cite: str = ""                    # where its formula comes from, when a reference implementation has it


SHARED = declare(Param("adv_eps", "added to the std (or mean) before dividing", low=0,
                       log="changed_if_acts"),
                 Param("std_unbiased", "std with N-1 (TRL, verl) or N", log="changed_if_acts"))
_STD = SHARED                          # estimators that divide by a std read both
_UNIT = {"low": 0, "high": 1}
_CRITIC = declare(Param("gae_gamma", "critic (gae): discount", **_UNIT, low_open=True),
                  Param("gae_lambda", "critic: lambda for policy advantages", **_UNIT),
                  Param("gae_lambda_critic", "critic: lambda for value targets (1 = Monte-Carlo return)", **_UNIT),
                  Param("gae_length_alpha", "VAPO length-adaptive lambda = 1 - 1/(alpha |o|); 0 = fixed lambda", low=0),
                  Param("critic_lr", "critic: learning rate of the value model", low=0, low_open=True),
                  Param("critic_warmup", "critic: optimizer steps that train only the critic (VAPO's value pretraining)",
                        low=0))
_NO_TRL_PER_TOKEN = "TRL 1.16 computes one advantage per completion from the group's rewards"
_NO_OTB_REWARD_KL = ("grpolab does not implement the optimal token baseline with a reward-side KL (verl's returns are "
                     "the reward-to-go of the score minus beta KL_t at every token; grpolab's outcome returns would "
                     "subtract the whole sequence's KL at every token)")

_ENTRIES = [
    Estimator("group_std", reads=_STD, unscorable=True, step_norm="std", trl={"scale_rewards": "group"}),
    Estimator("group_mean", unscorable=True, step_norm="mean", trl={"scale_rewards": "none"}),
    Estimator("batch_std", reads=_STD, unscorable=True, trl={"scale_rewards": "batch"}),
    Estimator("leave_one_out", unscorable=True, no_trl="TRL 1.16 has no leave-one-out baseline in GRPOTrainer"),
    Estimator("reinforce_pp", per_token=True, kl_per_token=True, kl_reward_only=True, no_trl=_NO_TRL_PER_TOKEN),
    Estimator("reinforce_pp_baseline", per_token=True, kl_per_token=True, no_trl=_NO_TRL_PER_TOKEN),
    Estimator("decoupled", reads=_STD, components=True, trl={"multi_objective_aggregation": "normalize_then_sum"},
              no_reward_kl="it normalises reward components separately; a reward-side KL would be one more component",
              multi_turn="an episode has one return, not reward components"),
    Estimator("value_tracker",
              params=declare(Param("tracker_decay", "value_tracker: Beta-tracker forgetting factor", **_UNIT, low_open=True)),
              reads=_STD, tracker=True,
              bounded="its Beta tracker reads each reward as a success probability",
              no_reward_kl="the tracker's success probability would absorb the KL penalty",
              no_trl="TRL 1.16 keeps no per-prompt state"),
    Estimator("gae", params=_CRITIC, inputs=("critic_values",),
              per_token=True, kl_per_token=True, critic=True, multi_turn="the critic reads single completions",
              no_trl="TRL 1.16's GRPOTrainer has no value model"),
]
_ENTRIES += [   # verl 0.9.1's further estimators (core_algos.py, register_adv_est)
    Estimator("opo", no_trl="TRL 1.16 has no length-weighted baseline",
              cite="OPO, Hao et al. 2025, arXiv:2505.23585; verl compute_opo_outcome_advantage"),
    Estimator("grpo_passk", reads=_STD, no_trl="TRL 1.16 has no pass@k advantage",
              cite="Tang, Zheng, Synnaeve, Munos 2025, Optimizing Language Models for Inference Time Objectives "
                   "using Reinforcement Learning, ICML 2025, arXiv:2503.19595 (r_max - r_second: its leave-one-out "
                   "estimator for k = group size; the std division is verl's); verl "
                   "compute_grpo_passk_outcome_advantage, whose eps is 1e-6 (method grpo_passk sets it; the "
                   "adv_eps default is 1e-4)"),
    Estimator("gpg", no_trl="TRL 1.16.0 has no GPG advantage (no GRPOConfig field, no experimental GPG trainer)",
              cite="GPG, Chu et al. 2025, arXiv:2504.02546; verl compute_gpg_outcome_advantage (alpha = N / "
                   "#non-zero rewards, F_norm = 1: verl's version, not checked against the paper's estimator)"),
    Estimator("remax", no_trl="TRL 1.16 generates no greedy baseline", inputs=("greedy_rewards",),
              multi_turn="grpolab generates the greedy baseline as one single-turn completion per prompt and does not "
                         "implement a greedy episode",
              no_reward_kl="grpolab does not implement ReMax with a reward-side KL (verl subtracts the greedy reward "
                           "from a per-token reward-to-go that carries the KL)",
              cite="ReMax, Li et al. 2023, arXiv:2310.10505; verl compute_remax_outcome_advantage"),
    Estimator("optimal_token_baseline", per_token=True, no_trl=_NO_TRL_PER_TOKEN, inputs=("pi_old_token_stats",),
              over_generated_tokens=True,
              no_reward_kl=_NO_OTB_REWARD_KL, cite="verl compute_optimal_token_baseline_advantage"),
    Estimator("tir_optimal_token_baseline", per_token=True, no_trl=_NO_TRL_PER_TOKEN, inputs=("pi_old_token_stats",),
              over_generated_tokens=True,
              no_reward_kl=_NO_OTB_REWARD_KL, cite="verl compute_multi_turn_optimal_token_baseline_advantage"),
]
_ENTRIES += [
    Estimator("maxrl", reads=declare(SHARED["adv_eps"]),
              bounded="it divides by the group's mean reward, a success rate only for rewards in [0, 1]",
              no_reward_kl="it divides by the group's mean reward, which a KL penalty can push to or below 0 "
                           "(flipping the advantages' sign)",
              no_trl="the installed TRL 1.16.0's scale_rewards has no 'mean' (group, batch, none)",
              cite="MaxRL, Tajwar, Zeng et al. 2026, Maximum Likelihood Reinforcement Learning, arXiv:2602.02710"),
]
#: the keys each input's provider returns, which ``compute_advantages`` accepts for an estimator whose
#: entry names that input: ``AdvantageInputs`` fields, or names no field holds, which reach the estimator
#: in ``AdvantageInputs.provided``. An input not listed returns one tensor under its own name.
INPUT_KEYS: dict[str, tuple[str, ...]] = {"critic_values": ("old_values",), "greedy_rewards": ("greedy_rewards",),
                                          "pi_old_token_stats": ("old_logp", "sum_pi_squared")}


def input_keys(name: str) -> tuple[str, ...]:
    """The keys the provider of input ``name`` returns (``INPUT_KEYS``; its own name if unlisted)."""
    return INPUT_KEYS.get(name, (name,))


def check_entry(entry: Estimator) -> None:
    """An entry's facts that must agree: the trainer builds a critic for ``critic`` entries and asks
    the critic for its values only for entries whose ``inputs`` name ``critic_values``, so one without
    the other would train a critic nobody reads or read a critic nobody built."""
    if entry.critic != ("critic_values" in entry.inputs):
        raise ValueError(f"advantage {entry.name!r}: critic={entry.critic} but inputs={entry.inputs!r}: an estimator "
                         "with a critic reads its values (inputs names 'critic_values'), and only such an estimator")


for _entry in _ENTRIES:
    check_entry(_entry)
ADVANTAGES: dict[str, Estimator] = {e.name: e for e in _ENTRIES}


def register_estimator(entry: Estimator) -> None:
    """Add ``entry`` to the axis (tests register a toy estimator this way, with its function)."""
    if entry.name in ADVANTAGES:
        raise ValueError(f"advantage {entry.name!r} has an entry already")
    check_entry(entry)
    ADVANTAGES[entry.name] = entry


def unregister_estimator(name: str) -> None:
    ADVANTAGES.pop(name)


def estimators(**facts) -> tuple[str, ...]:
    """The estimators whose entries have every given fact, e.g. ``estimators(unscorable=True)``."""
    return tuple(e.name for e in ADVANTAGES.values() if all(getattr(e, k) == v for k, v in facts.items()))


def advantage_params() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for e in ADVANTAGES.values() for p in e.params))


def trl_advantage(settings: dict) -> str | None:
    """The estimator TRL computes under GRPOConfig ``settings`` (scale_rewards / multi_objective_aggregation)."""
    aggregation = settings.get("multi_objective_aggregation", "sum_then_normalize")
    if aggregation == "normalize_then_sum":   # TRL then ignores scale_rewards
        settings = {"multi_objective_aggregation": "normalize_then_sum"}
    elif aggregation != "sum_then_normalize":
        return None   # a value TRL 1.16 does not have
    else:
        settings = {"scale_rewards": settings.get("scale_rewards", "group")}
    return next((e.name for e in ADVANTAGES.values() if e.trl == settings), None)
