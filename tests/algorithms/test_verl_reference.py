"""verl 0.9.1's estimators and policy losses against grpolab's, on shared tensors, to 1e-5: advantage
values, the loss, its gradient with respect to the log-probs, and the statistics verl reports.
The expected values are verl's own outputs, recorded by tests/fixtures/verl/make_fixtures.py
(provenance: tests/fixtures/verl/PROVENANCE.md); verl is not needed to run these tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grpolab.algorithms import compute_advantages, LossInputs, policy_loss
from grpolab.algorithms import baselines
from grpolab.algorithms.estimators import ESTIMATORS, AdvantageInputs
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.spec import MethodSpec, build_spec

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "verl" / "core_algos_0.9.1.json").read_text())
X = {k: torch.tensor(v) if k != "index" else v for k, v in FIXTURE["inputs"].items()}
G = 4
TOL = dict(atol=1e-5, rtol=0)


def _expected(name: str) -> torch.Tensor:
    return torch.tensor(FIXTURE["advantages"][name])


def _per_token(a: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (a.unsqueeze(1) if a.dim() == 1 else a) * mask


def test_fixture_provenance():
    p = FIXTURE["provenance"]
    assert p["verl_version"] == "0.9.1" and p["file"] == "verl/trainer/ppo/core_algos.py" and len(p["sha256"]) == 64
    provenance = (Path(__file__).parents[1] / "fixtures" / "verl" / "PROVENANCE.md").read_text()
    assert f"sha256 `{p['sha256']}`" in provenance   # the recorded file is the one the provenance names
    assert X["index"] == [i // G for i in range(12)]   # grpolab's contiguous groups of G are verl's uids


@pytest.mark.parametrize("name, axes", [("grpo_passk", {"adv_eps": 1e-6}), ("opo", {}), ("gpg", {})])
def test_trainable_estimators_match_verl(name, axes):
    spec = build_spec({"advantage": name, **axes})
    a = compute_advantages(spec, AdvantageInputs(X["scores"], G, mask=X["mask"])).advantages
    torch.testing.assert_close(_per_token(a, X["mask"]), _expected(name), **TOL)


def test_pass_at_k_without_std_matches_verl():
    a = baselines.pass_at_k(X["scores"], G, 1e-6, std_norm=False)
    torch.testing.assert_close(_per_token(a, X["mask"]), _expected("grpo_passk_no_std"), **TOL)


def _fn_inputs(mask, **given) -> AdvantageInputs:
    return AdvantageInputs(X["scores"], G, mask=mask, **given)


def test_remax_matches_verl_given_the_greedy_rewards():
    a = ESTIMATORS["remax"].fn(MethodSpec(advantage="remax"), _fn_inputs(X["mask"], greedy_rewards=X["reward_baselines"]))
    torch.testing.assert_close(_per_token(a, X["mask"]), _expected("remax"), **TOL)
    with pytest.raises(ValueError, match="greedy completion"):   # the trainer supplies them where the entry asks
        ESTIMATORS["remax"].fn(MethodSpec(advantage="remax"), _fn_inputs(X["mask"]))


@pytest.mark.parametrize("name, mask", [("optimal_token_baseline", "mask"), ("tir_optimal_token_baseline", "holed_mask")])
def test_optimal_token_baselines_match_verl(name, mask):
    inputs = _fn_inputs(X[mask], old_logp=X["old_logp"], sum_pi_squared=X["sum_pi_squared"])
    a = ESTIMATORS[name].fn(MethodSpec(advantage=name), inputs)
    assert ADVANTAGES[name].per_token and a.shape == X[mask].shape
    torch.testing.assert_close(a, _expected(name), **TOL)


def test_the_two_token_baselines_differ_only_where_a_mask_has_holes():
    args = (X["scores"], X["mask"], X["old_logp"], X["sum_pi_squared"], G)
    torch.testing.assert_close(baselines.tir_optimal_token_baseline(*args), baselines.optimal_token_baseline(*args))
    assert not torch.allclose(_expected("tir_optimal_token_baseline"),
                              baselines.optimal_token_baseline(X["scores"], X["holed_mask"], *args[2:]))


# -- policy losses ---------------------------------------------------------------------------------------

_SURROGATE = {"dppo_tv": "dppo_tv", "dppo_kl": "dppo_kl", "gpg": "reinforce", "dro": "dro"}   # verl's gpg loss is -A log pi
_AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean"}
_STATS = {"actor/pg_clipfrac": "dppo/masked_fraction", "actor/pg_clipfrac_lower": "dppo/truncated_fraction",
          "actor/ppo_kl": "policy/old_kl"}


def _spec(name: str, agg: str, config: dict) -> MethodSpec:
    axes = {"surrogate": _SURROGATE[name], "aggregation": _AGGREGATION[agg], "kl_coef": 0.0}
    if name.startswith("dppo"):
        axes |= {"eps_low": config["clip_ratio_low"], "eps_high": config["clip_ratio_high"],
                 "dual_clip_c": config["clip_ratio_c"]}
    if name == "dro":
        axes["dro_beta"] = config["dro_beta"]
    return build_spec(axes)


EDGES = FIXTURE["edges"]
E = {k: torch.tensor(v) if isinstance(v, list) and k != "singleton_index" else v for k, v in EDGES["inputs"].items()}


@pytest.mark.parametrize("edges", [False, True], ids=["shared", "edges"])   # edges: A = 0 tokens, |log-ratio| > 20
@pytest.mark.parametrize("case", list(FIXTURE["losses"]))
def test_policy_losses_match_verl(case, edges):
    name, agg = case.split("/")
    expected = (EDGES if edges else FIXTURE)["losses"][case]
    logp = (E if edges else X)["logp"].clone().requires_grad_()
    loss, stats = policy_loss(_spec(name, agg, expected["config"]), LossInputs(logp, X["old_logp"],
                              (E if edges else X)["token_advantages"], X["mask"]))
    loss.backward()
    assert float(loss.detach()) == pytest.approx(expected["loss"], abs=1e-5)
    torch.testing.assert_close(logp.grad, torch.tensor(expected["grad"]), **TOL)
    assert expected["metrics"].keys() <= _STATS.keys()
    for verl_name, value in expected["metrics"].items():
        assert stats[_STATS[verl_name]] == pytest.approx(value, abs=1e-5), verl_name
    if name.startswith("dppo"):   # the fixture exercises both of DPPO's cuts
        assert 0 < stats["dppo/masked_fraction"] < 1 and stats["dppo/truncated_fraction"] > 0


@pytest.mark.parametrize("name", ["opo", "gpg"])
def test_groups_of_one_match_verl(name):
    a = compute_advantages(build_spec({"advantage": name}), AdvantageInputs(X["scores"], 1, mask=X["mask"])).advantages
    torch.testing.assert_close(_per_token(a, X["mask"]), torch.tensor(EDGES[f"{name}_g1"]), **TOL)


def test_a_tool_turn_row_without_model_tokens_matches_verl():
    mask = E["empty_row_mask"]
    inputs = _fn_inputs(mask, old_logp=X["old_logp"], sum_pi_squared=X["sum_pi_squared"])
    a = ESTIMATORS["tir_optimal_token_baseline"].fn(MethodSpec(advantage="tir_optimal_token_baseline"), inputs)
    assert mask[3].sum() == 0 and a[3].abs().sum() == 0
    torch.testing.assert_close(a, torch.tensor(EDGES["tir_optimal_token_baseline_empty_row"]), **TOL)


# -- each new estimator's mechanism, and where it cannot act --------------------------------------------

def test_opo_is_group_mean_when_lengths_are_equal_and_weights_by_length_otherwise():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    spec = build_spec({"advantage": "opo"})
    equal = compute_advantages(spec, AdvantageInputs(r, 4, mask=torch.ones(4, 5))).advantages
    group_mean = compute_advantages(build_spec({"advantage": "group_mean"}), AdvantageInputs(r, 4)).advantages
    torch.testing.assert_close(equal, group_mean)
    longer_correct = compute_advantages(spec, AdvantageInputs(r, 4, lengths=torch.tensor([7.0, 1.0, 1.0, 1.0]))).advantages
    assert longer_correct.tolist() == pytest.approx([1 - 0.7, -0.7, -0.7, -0.7])   # b = 7 / 10


def test_passk_moves_only_the_best_and_is_zero_when_the_top_two_tie():
    spec = build_spec({"advantage": "grpo_passk", "adv_eps": 1e-6})
    a = compute_advantages(spec, AdvantageInputs(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 4)).advantages
    assert a[0] == pytest.approx(1 / 0.5, rel=1e-5) and a[1:].abs().sum() == 0   # std([1,0,0,0]) = 0.5


def test_gpg_scales_by_the_share_of_nonzero_rewards():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    a = compute_advantages(build_spec({"advantage": "gpg"}), AdvantageInputs(r, 4)).advantages
    group_mean = compute_advantages(build_spec({"advantage": "group_mean"}), AdvantageInputs(r, 4)).advantages
    torch.testing.assert_close(a, 8 / 5 * group_mean)
