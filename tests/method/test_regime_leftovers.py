"""Issue-10 review leftovers: dual_clip_c / sapo_tau are inert on-policy (checked against the
gradient, not just declared), and an objective over a missing eval key is a config error."""

from __future__ import annotations

import warnings

import pytest
import torch

from grpolab.algorithms import LossInputs, policy_loss
from grpolab.experiment.config import build_config
from grpolab.errors import ConfigError
from grpolab.studies.objectives import objective_value
from grpolab.method.requirements import inert_settings
from grpolab.method.spec import build_spec


def _cfg(method: dict, minibatches: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_config({"name": "r", "method": {"base": "grpo", "kl_coef": 0.0, **method},
                             "train": {"minibatches": minibatches}})


def _grad_on_policy(**axes) -> torch.Tensor:
    """d loss / d log pi at rho = 1 (old = current log-probs), mixed-sign advantages."""
    logp = torch.tensor([[-0.3, -1.2, -0.7], [-2.0, -0.1, -0.5]], requires_grad=True)
    loss, _ = policy_loss(build_spec({"aggregation": "token_mean_local", **axes}), LossInputs(logp, logp.detach(),
                          torch.tensor([1.5, -2.0]), torch.ones(2, 3)))
    loss.backward()
    return logp.grad


@pytest.mark.parametrize("axes,other", [
    ({"surrogate": "dual_clip", "dual_clip_c": 2.0}, {"surrogate": "dual_clip", "dual_clip_c": 10.0}),
    ({"surrogate": "sapo", "sapo_tau_pos": 0.5, "sapo_tau_neg": 8.0}, {"surrogate": "sapo", "sapo_tau_pos": 4.0,
                                                                        "sapo_tau_neg": 1.05}),
])
def test_dual_clip_c_and_sapo_tau_do_not_change_the_on_policy_gradient(axes, other):
    g1, g2 = _grad_on_policy(**axes), _grad_on_policy(**other)
    assert torch.allclose(g1, g2, atol=1e-7)
    assert torch.allclose(g1, _grad_on_policy(surrogate="clip"), atol=1e-7)   # = the unclipped -A grad rho
    assert g1.abs().min() > 0


def test_dual_clip_c_and_sapo_tau_are_warned_inert_on_policy_only():
    on = _cfg({"surrogate": "dual_clip", "dual_clip_c": 5.0}, minibatches=1)
    assert inert_settings(on) == ["surrogate=dual_clip", "dual_clip_c=5.0"]
    assert any(w.startswith("method.dual_clip_c=5.0 needs surrogate dual_clip, dppo_tv or dppo_kl with rollout reuse") for w in on.warnings)
    assert inert_settings(_cfg({"surrogate": "dual_clip", "dual_clip_c": 5.0}, minibatches=2)) == []
    sapo = _cfg({"surrogate": "sapo", "sapo_tau_pos": 2.0, "sapo_tau_neg": 3.0}, minibatches=1)
    assert inert_settings(sapo) == ["surrogate=sapo", "sapo_tau_pos=2.0", "sapo_tau_neg=3.0"]
    assert inert_settings(_cfg({"surrogate": "sapo", "sapo_tau_pos": 2.0, "sapo_tau_neg": 3.0}, minibatches=2)) == []
    # off the surrogate it stays inert for the old reason (wrong surrogate), also with reuse
    assert "dual_clip_c=5.0" in inert_settings(_cfg({"dual_clip_c": 5.0}, minibatches=2))


def test_objective_over_a_missing_eval_key_names_it_and_the_available_ones():
    evals = {0: {"eval/pass_at_1": 0.1, "eval/pass_at_k": 0.3}, 10: {"eval/pass_at_1": 0.4, "eval/pass_at_k": 0.5}}
    for metric in ("final:eval/pass_at_2", "auc:eval/pass_at_2", "steps_to:eval/pass_at_2>=0.3",
                   "tokens_to:eval/pass_at_2>=0.3"):
        with pytest.raises(ConfigError, match=r"no key 'eval/pass_at_2'; available: eval/pass_at_1, eval/pass_at_k"):
            objective_value(metric, evals, {})
    assert objective_value("auc:eval/pass_at_k", evals, {}) == pytest.approx(0.4)
    assert objective_value("steps_to:eval/pass_at_1>=0.3", evals, {}) == 10.0
