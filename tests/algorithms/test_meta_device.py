"""Every registered algorithm function on ``device="meta"`` inputs.

A meta tensor has a shape and a dtype but no data, and refuses a CPU operand (``meta + cpu``
raises ``Tensor on device cpu is not on the expected device meta!``) as a CUDA tensor does. So a
function that builds a CPU tensor and mixes it with its inputs fails here on a CPU machine, as it
would on a GPU; one that returns a CPU tensor fails the device check on its outputs. Functions
whose control flow reads values (``.item()``, ``bool(t)``, ``.tolist()``, data-dependent shapes)
cannot run on meta: ``ON_THE_CPU`` names each with the reason, and those run on CPU inputs under
the device guard (device_guard.py) instead, which also follows the host tensors they make, as
every method's training step does (test_contract.py).
"""

from __future__ import annotations

import os

import pytest
import torch

from device_guard import factories_name_their_device
from grpolab.algorithms import advantages as adv
from grpolab.algorithms import aggregations, estimators, gigpo, kl, ratios, sampler_corrections, sampling_options
from grpolab.algorithms import combine_rewards, entropy_mask, surrogates
from grpolab.algorithms.shaping import soft_overlong_penalty
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.registry import METHODS
from grpolab.method.spec import build_spec
from grpolab.trainer.sampling import rows_of_groups

N, G, T, K = 8, 4, 5, 2


def batch(device: str) -> dict:
    """One batch of every shape an algorithm function reads, on ``device`` (drawn on the CPU), and
    the inputs that are host tensors in production on the CPU whatever ``device`` is (``host_*``:
    correctness from rollouts.correct_of, GFPO's lengths and rewards, which sampling.gfpo_filter
    moves to the CPU), so a function that mixes them with device tensors without a .to() fails
    here (meta + cpu raises) as it would on a GPU."""
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, device="cpu").to(device)
    mask = torch.ones(N, T, device="cpu")
    mask[::2, 3:] = 0
    log_ratio = (torch.rand(N, T, generator=gen, device="cpu") - 0.5) * 0.4
    logp = -torch.rand(N, T, generator=gen, device="cpu")
    return {"r": rand(N), "rk": rand(N, K), "mask": mask.to(device), "logp": logp.to(device),
            "old_logp": (logp - log_ratio).to(device), "ref_logp": -rand(N, T), "lengths": mask.sum(1).to(device),
            "greedy": rand(N), "sum_pi_squared": rand(N, T) * 0.5, "penalty": rand(N, T) * 0.01,
            "A": rand(N, 1) - 0.5, "values": rand(N, T),
            "group_ids": (torch.arange(N, device="cpu") // G).to(device),
            "host_correct": torch.rand(N, generator=gen, device="cpu") > 0.5,
            "host_lengths": mask.sum(1), "host_r": torch.rand(N, generator=gen, device="cpu"),
            # GiGPO's turn index, built on the CPU by envs/trainer_rollout.py
            "host_turns": torch.tensor([[0, 0, -1, 1, 1] if i % 2 else [0, 0, -1, -1, -1] for i in range(N)],
                                       device="cpu")}


def _advantage(name: str, x: dict):
    fn = estimators.ESTIMATORS[name]
    # the critic's estimator under PPO's fixed lambda and VAPO's length-adaptive one (whitened)
    specs = [METHODS["ppo"].spec(), METHODS["vapo"].spec({"whiten_advantages": True})] if name == "gae" else [
        build_spec({"advantage": name})]
    inputs = estimators.AdvantageInputs(
        x["rk"] if ADVANTAGES[name].components else x["r"], G, mask=x["mask"],
        token_penalty=x["penalty"], prompt_keys=[f"q{i // G}" for i in range(N)], tracker=adv.ValueTracker(0.9),
        lengths=x["lengths"], greedy_rewards=x["greedy"], old_logp=x["old_logp"], sum_pi_squared=x["sum_pi_squared"],
        old_values=x["values"])
    return [fn.fn(spec, inputs) for spec in specs] + (
        [fn.unscorable(specs[0], x["r"], inputs)] if fn.unscorable is not None else [])


def _ratio(name: str, x: dict):
    fn, log_ratio = ratios.RATIO_FUNCTIONS[name], x["logp"] - x["old_logp"]
    out = [fn.log_weights(log_ratio, x["mask"])]
    return out + ([fn.loss(build_spec({"ratio": name}), log_ratio, x["A"], x["mask"])] if fn.loss is not None else [])


def _surrogate(name: str, x: dict):
    log_ratio = x["logp"] - x["old_logp"]
    b = surrogates.Batch(x["logp"], log_ratio, torch.exp(log_ratio), x["A"], x["mask"], None, None, x["ref_logp"],
                         x["r"], x["group_ids"])
    stats: dict = {}
    return [surrogates.SURROGATE_LOSSES[name].fn(build_spec({"surrogate": name}), b, stats)] + list(stats.values())


def _cap_policy(name: str, x: dict):
    informative = x["group_ids"][:1]   # group 0 only; 2 groups needed
    try:
        return [sampling_options.CAP_FUNCTIONS[name](x["r"].view(-1, G), informative, 2)]
    except sampling_options.SamplingCapError:   # ``fail``'s one behaviour
        return []


# registry -> (its functions by name, how one is called on a batch)
REGISTRIES = {
    "advantage": (estimators.ESTIMATORS, _advantage),
    "aggregation": (aggregations.AGGREGATION_FUNCTIONS, lambda name, x: [aggregations.AGGREGATION_FUNCTIONS[name](
        x["logp"] * x["mask"], x["mask"], aggregations.Normalisers(x["mask"].sum(), T))]),
    "kl": (kl.KL_FUNCTIONS, lambda name, x: [kl.KL_FUNCTIONS[name](x["logp"] - x["ref_logp"])]),
    "ratio": (ratios.RATIO_FUNCTIONS, _ratio),
    "surrogate": (surrogates.SURROGATE_LOSSES, _surrogate),
    "sampler_correction": (sampler_corrections.CORRECTION_FUNCTIONS, lambda name, x: [
        sampler_corrections.CORRECTION_FUNCTIONS[name](x["logp"] - x["old_logp"], 0.5, 2.0)]),
    "sampling_filter": (sampling_options.FILTER_FUNCTIONS, lambda name, x: [
        sampling_options.FILTER_FUNCTIONS[name](x["r"], x["host_correct"])]),
    "cap_policy": (sampling_options.CAP_FUNCTIONS, _cap_policy),
    "gfpo_metric": (sampling_options.GFPO_SCORES, lambda name, x: [
        sampling_options.GFPO_SCORES[name](x["host_lengths"].view(-1, G), x["host_r"].view(-1, G))]),
    "episode_norm": (gigpo.EPISODE_NORM_FUNCTIONS, lambda name, x: [gigpo.EPISODE_NORM_FUNCTIONS[name](
        x["r"], gigpo.EpisodeBatch([0.5] * N, [2] * N, G, std_norm=True, eps=1e-4, unbiased=True))]),
}
def _episodes(step_omega: float):
    """GiGPO's two levels on the estimator's A^E (x["r"], the batch's device) of N episodes of one or
    two turns, as EpisodeRollout supplies them: host lists and a CPU turn index (None without a step term)."""
    def run(x):
        keys = [["s", f"t{i % 3}"][: 1 + i % 2] for i in range(N)]
        episodes = gigpo.Episodes([[0.1 * i, 1.0][: 1 + i % 2] for i in range(N)], gigpo.anchor_groups(keys, G),
                                  x["host_turns"] if step_omega > 0 else None)
        spec = build_spec({"advantage": "group_std", "episode_norm": "step", "step_omega": step_omega})
        return [gigpo.episode_advantages(spec, x["r"], episodes, G)]
    return run


# pure functions outside a registry that the training step calls on the batch's device
FUNCTIONS = {
    "episode_advantages": _episodes(0.0),
    "episode_advantages_step_term": _episodes(1.0),
    "combine_rewards": lambda x: [combine_rewards(x["rk"], None), combine_rewards(x["rk"], (1.0, 0.5))],
    "soft_overlong_penalty": lambda x: [soft_overlong_penalty(x["lengths"], 4, 2)],
    "whiten_tokens": lambda x: [adv.whiten_tokens(x["values"], x["mask"])],
    "rows_of_groups": lambda x: [rows_of_groups(x["group_ids"][::G], G)],
    "entropy_mask": lambda x: [entropy_mask(x["values"], x["mask"], 0.2)],
}

# (registry, name) -> why it cannot run on meta; it runs on the CPU under the device guard
ON_THE_CPU = {
    ("advantage", "value_tracker"): "checks r in [0, 1] (bool of a tensor); its tracker keeps host floats (tolist)",
    ("advantage", "decoupled"): "refuses NaN rewards through torch.isnan(r).any() (bool of a tensor)",
    ("advantage", "optimal_token_baseline"): "a Python loop per group, int() of its lengths, nonzero()",
    ("advantage", "tir_optimal_token_baseline"): "a Python loop per group, int() of its lengths, nonzero()",
    ("surrogate", "vespo"): "logs float(phi.mean()) of its per-sequence weight",
    ("surrogate", "clip_cov"): "draws max(1, fraction * mask.sum().item()) of the nonzero() candidates",
    ("surrogate", "kl_cov"): "ranks the nonzero() valid tokens' covariance",
    ("surrogate", "group_dpo"): "pairs completions through unique() of the group ids",
    ("cap_policy", "fill"): "the groups left over come from informative.tolist()",
    ("function", "entropy_mask"): "boolean indexing (nonzero()) of the valid tokens' entropies",
    ("function", "episode_advantages_step_term"): "builds its step table from host floats on the CPU, where the "
                                                  "turn index is, and copies A^E there (a meta tensor has no data)",
}

CASES = [(registry, name) for registry, (functions, _) in REGISTRIES.items() for name in functions] + [
    ("function", name) for name in FUNCTIONS]


def _call(registry: str, name: str, x: dict) -> list:
    return FUNCTIONS[name](x) if registry == "function" else REGISTRIES[registry][1](name, x)


def _tensors(out) -> list[torch.Tensor]:
    """The tensors in ``out``, tuples (GAE's ``Estimate``: advantages and value targets) opened."""
    flat = [t for o in out for t in (o if isinstance(o, tuple) else (o,))]
    return [t for t in flat if isinstance(t, torch.Tensor)]


@pytest.fixture
def stats_stay_tensors(monkeypatch):
    """A surrogate's logged fractions end in float(), which reads a value; on meta they stay tensors
    (the arithmetic before the float, and so any device mixing in it, is unchanged)."""
    def masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        x = x.expand_as(m) if x.shape != m.shape else x
        return (x.float() * m).sum() / m.sum().clamp(min=1.0)
    monkeypatch.setattr(surrogates, "masked_mean", masked_mean)


ON_META = [c for c in CASES if c not in ON_THE_CPU]
# registries whose every input is a host tensor in production (sampling.gfpo_filter): outputs stay on the CPU
HOST_SIDE = {"gfpo_metric"}


@pytest.mark.parametrize("registry,name", ON_META, ids=["/".join(c) for c in ON_META])
def test_runs_on_meta_inputs_and_returns_meta_tensors(registry, name, stats_stay_tensors):
    out = _tensors(_call(registry, name, batch("meta")))
    assert out or (registry, name) == ("cap_policy", "fail")
    want = "cpu" if registry in HOST_SIDE else "meta"
    assert [t.device.type for t in out] == [want] * len(out), f"{registry}/{name} returned a tensor off its inputs' device"


@pytest.mark.parametrize("registry,name", sorted(ON_THE_CPU), ids=["/".join(c) for c in sorted(ON_THE_CPU)])
def test_what_cannot_run_on_meta_names_its_devices(registry, name):
    x = batch("cpu")
    with factories_name_their_device() as guard:   # the inputs stand for the accelerator's, host_* for the host's
        for key in [k for k in x if k.startswith("host_")]:
            guard.follow(x[key], f"the test's {key}")
        out = _tensors(_call(registry, name, x))
        on_the_host = [guard.host_origin(t) for t in out if guard.host_origin(t) is not None]
    assert out and all(torch.isfinite(t.float()).all() for t in out)
    if registry not in HOST_SIDE:   # what it returns is on its inputs' device: moved back if made on the host
        assert not on_the_host, f"{registry}/{name} returns a host tensor made at {on_the_host[0]}"


def test_the_factory_guard_names_the_line_and_the_factory_of_a_deviceless_call():
    here = os.path.dirname(os.path.abspath(__file__))
    with pytest.raises(AssertionError, match=r"test_meta_device.py:\d+ torch.arange\(\.\.\.\) names no device") as caught:
        with factories_name_their_device(here):
            torch.zeros(2, device="cpu") + torch.arange(2)
    assert "torch.zeros" not in str(caught.value)


def test_every_skip_is_a_registered_function():
    assert set(ON_THE_CPU) <= set(CASES)
