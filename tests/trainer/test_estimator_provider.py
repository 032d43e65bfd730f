"""A new advantage estimator that needs a new trainer input, added here and nowhere else: its
method-floor entry (with its one new setting, a ``Param``), the provider of its input
(``trainer.estimator_inputs.register_provider``) and its torch function. No trainer module names
it: the drop-in trainer trains it for one step (learning rate 0, so what it saw can be recomputed),
the provider's tensor reaches the function, and the advantages the loss reads are the function's.

The toy estimator: A_i = toy_alpha * (r_i - mean of i's group) / P_i, P_i the prompt tokens of
row i, which the trainer computes for no built-in estimator."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from grpolab import GrpoLabTrainer
from grpolab.algorithms import estimators
from grpolab.errors import ConfigError
from grpolab.method.advantages import Estimator, register_estimator, unregister_estimator
from grpolab.method.params import Param, declare
from grpolab.method.requirements import inert_settings
from grpolab.method.spec import MethodSpec, validate_spec
from grpolab.trainer import estimator_inputs
from grpolab.trainer.estimator_inputs import Provider, register_provider
from grpolab.tracking.naming import method_params

G = 4
NAME = "toy_prompt_scaled"
ToySpec = dataclasses.make_dataclass("ToySpec", [("toy_alpha", float, 0.5)], bases=(MethodSpec,), frozen=True)


def _prompt_tokens(part, call) -> dict:
    return {"prompt_tokens": call.out["prompt_mask"].sum(1).float()}


@pytest.fixture
def toy(monkeypatch):
    """The three declarations; ``seen`` collects what the function was given."""
    seen = []
    register_estimator(Estimator(NAME, params=declare(Param("toy_alpha", "the toy's scale", low=0, high=1)),
                                 inputs=("prompt_tokens",), no_trl="a test's estimator"))
    register_provider("prompt_tokens", Provider(_prompt_tokens, whole_groups=True))

    @estimators.register(NAME)
    def toy_fn(spec, x):
        p = x.provided["prompt_tokens"]                     # this process's rows
        r = x.rewards if x.local_rows is None else x.rewards[x.local_rows]
        seen.append({"rewards": r.clone(), "prompt_tokens": p.clone()})
        groups = r.view(-1, x.group_size)
        return spec.toy_alpha * (groups - groups.mean(1, keepdim=True)).flatten() / p
    try:
        yield seen
    finally:
        unregister_estimator(NAME)
        estimators.ESTIMATORS.pop(NAME)
        estimator_inputs.PROVIDERS.pop("prompt_tokens")


def test_its_setting_is_checked_logged_and_reported_inert_from_its_declaration(toy):
    with pytest.raises(ConfigError, match=r"^method\.toy_alpha: must be in \[0, 1\], got 1\.5$"):
        validate_spec(ToySpec(advantage=NAME, toy_alpha=1.5))
    assert method_params(ToySpec(advantage=NAME))["toy_alpha"] == 0.5
    under_another = SimpleNamespace(spec=ToySpec(toy_alpha=0.3), reuses_rollouts=True)
    assert inert_settings(under_another) == ["toy_alpha=0.3"]


def test_an_estimator_without_a_provider_for_its_input_is_refused(toy):
    register_estimator(Estimator("toy_unprovided", inputs=("nobody_computes_this",), no_trl="a test's estimator"))
    try:
        with pytest.raises(ValueError, match="reads 'nobody_computes_this', which no provider supplies; provided: "
                                             "critic_values, greedy_rewards, pi_old_token_stats, prompt_tokens"):
            estimator_inputs.needs_whole_groups("toy_unprovided")
    finally:
        unregister_estimator("toy_unprovided")


def test_the_trainer_supplies_the_new_input_and_trains_on_the_functions_advantages(toy, tiny_model_dir, tmp_path,
                                                                                    monkeypatch):
    import datasets
    from trl import GRPOConfig

    from conftest import tiny_dataset
    _, train, _ = tiny_dataset(32)
    data = datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "answer": [e.answer for e in train]})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="none", max_steps=1, logging_steps=1,
                      per_device_train_batch_size=8, num_generations=G, max_completion_length=8, use_cpu=True,
                      bf16=False, disable_tqdm=True, save_strategy="no", seed=0, top_k=0, learning_rate=0.0)
    seen_by_loss = []
    original_loss = GrpoLabTrainer._compute_loss

    def loss_spy(self, model, inputs):
        seen_by_loss.append((inputs["advantages"].clone(), inputs["prompt_mask"].sum(1).float()))
        return original_loss(self, model, inputs)
    monkeypatch.setattr(GrpoLabTrainer, "_compute_loss", loss_spy)

    def reward(completions, **kwargs):
        return [float(len(set(c))) for c in completions]
    trainer = GrpoLabTrainer(str(tiny_model_dir), reward_funcs=[reward], args=args, train_dataset=data,
                             method=ToySpec(advantage=NAME, toy_alpha=0.5))
    trainer.train()

    [call] = toy
    assert call["prompt_tokens"].shape == (8,) and (call["prompt_tokens"] > 0).all()
    groups = call["rewards"].view(-1, G)
    expected = 0.5 * (groups - groups.mean(1, keepdim=True)).flatten() / call["prompt_tokens"]
    advantages = torch.cat([a for a, _ in seen_by_loss])
    prompt_tokens = torch.cat([p for _, p in seen_by_loss])
    assert advantages.shape == (8,) and expected.abs().sum() > 0   # the rewards differ within a group
    # TRL shuffles a generation batch's rows before the loss: compared as (prompt tokens, advantage) pairs
    got = sorted(zip(prompt_tokens.tolist(), advantages.tolist()))
    want = sorted(zip(call["prompt_tokens"].tolist(), expected.tolist()))
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))


def test_compute_advantages_refuses_an_input_no_entry_names():
    """A misspelt input keyword to an estimator that reads none is refused, not carried along unread."""
    from grpolab import algorithms
    from grpolab.method.spec import build_spec
    with pytest.raises(TypeError, match=r"input 'greedy_reward' is not one advantage=group_std reads: besides the "
                                        r"AdvantageInputs fields \(.*greedy_rewards.*\) it reads no other input$"):
        algorithms.compute_advantages(build_spec({}), algorithms.AdvantageInputs.of(
            torch.tensor([1.0, 0.0, 1.0, 0.0]), 2, greedy_reward=torch.zeros(4)))


def test_an_estimator_that_names_inputs_still_refuses_a_misspelt_one():
    """GAE names an input (critic_values) whose key is a field (old_values): a misspelt ``old_value``
    is refused, naming the key and what the estimator reads, not left unread."""
    from grpolab import algorithms
    from grpolab.method.spec import build_spec
    mask = torch.ones(2, 3)
    with pytest.raises(TypeError, match=r"input 'old_value' is not one advantage=gae reads: besides the AdvantageInputs "
                                        r"fields \(.*old_values.*\) it reads no other input \(its inputs: critic_values\)"):
        algorithms.compute_advantages(build_spec({"advantage": "gae"}), algorithms.AdvantageInputs.of(
            torch.tensor([1.0, 0.0]), 2, mask=mask, old_values=torch.zeros(2, 3), old_value=torch.zeros(2, 3)))


def test_a_toy_estimator_reads_its_declared_key_and_refuses_any_other(toy):
    from grpolab import algorithms
    spec = ToySpec(advantage=NAME, toy_alpha=0.5)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    out = algorithms.compute_advantages(spec, algorithms.AdvantageInputs.of(rewards, 2, prompt_tokens=torch.ones(4)))
    assert out.advantages.tolist() == [0.25, -0.25, 0.25, -0.25]
    with pytest.raises(TypeError, match=r"input 'prompt_token' is not one advantage=toy_prompt_scaled reads: .* it "
                                        r"reads prompt_tokens \(its inputs: prompt_tokens\)"):
        algorithms.compute_advantages(spec, algorithms.AdvantageInputs.of(rewards, 2, prompt_tokens=torch.ones(4),
                                                                          prompt_token=torch.ones(4)))


def test_a_provider_returning_a_key_its_input_does_not_declare_is_named(toy):
    """The trainer's side of the same rule: the provider, not the estimator, is named."""
    estimator_inputs.PROVIDERS["prompt_tokens"] = Provider(lambda part, call: {"prompt_tokenz": torch.ones(2)})
    trainer = SimpleNamespace(spec=ToySpec(advantage=NAME), rollout_func=None)
    part = estimator_inputs.EstimatorInputs(trainer, score_greedy=None)
    with pytest.raises(ValueError, match=r"the provider of estimator input 'prompt_tokens' returned 'prompt_tokenz', "
                                         r"which it does not declare \(method.advantages.input_keys: prompt_tokens\)"):
        part.extras([{}], {"completion_ids": torch.zeros(2, 3)}, torch.ones(2, 3))
