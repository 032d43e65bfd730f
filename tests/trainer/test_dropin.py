"""The drop-in trainer: TRL's GRPO quickstart with ``GrpoLabTrainer(method=...)`` instead of
``GRPOTrainer``, offline (a local tiny model, an in-memory dataset, the user's own rewards).

TRL's quickstart (docs, "Quick start" of the GRPO trainer) and the drop-in differ in two lines:
    -from trl import GRPOTrainer
    +from grpolab import GrpoLabTrainer
    -trainer = GRPOTrainer(
    +trainer = GrpoLabTrainer(method="dapo",
"""

import math

import pytest
import torch

from grpolab import GrpoLabTrainer


def reward_num_unique_chars(completions, **kwargs):
    """TRL quickstart's reward: the number of unique characters of each completion."""
    return [float(len(set(c))) for c in completions]


def solved(completions, solvable, **kwargs):
    """The user's correctness-like reward: 1 for an even-length completion of a solvable prompt.
    Three prompts in four can never be solved, so their groups are all-wrong and dynamic
    sampling has to refill the batch."""
    return [float(s and len(c) % 2 == 0) for c, s in zip(completions, solvable)]


def _dataset(n=64):
    import datasets
    from conftest import tiny_dataset
    _, train, _ = tiny_dataset(n)
    return datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "answer": [e.answer for e in train],
                                       "solvable": [i % 4 == 0 for i in range(len(train))]})


def _args(tmp_path, **kw):
    from trl import GRPOConfig
    base = dict(output_dir=str(tmp_path / "out"), report_to="none", max_steps=2, logging_steps=1,
                per_device_train_batch_size=8, num_generations=4, max_completion_length=8, use_cpu=True, bf16=False,
                disable_tqdm=True, save_strategy="no", seed=0, top_k=0)
    base.update(kw)
    return GRPOConfig(**base)


class _LossSpy:
    """Records every ``policy_loss`` call of the trainer (inputs and result)."""

    def __init__(self, monkeypatch):
        from grpolab import algorithms
        self.calls, original = [], algorithms.policy_loss

        def spy(spec, inputs):
            loss, stats = original(spec, inputs)
            self.calls.append({"logp": inputs.logp.detach().clone(), "old": inputs.old_logp.detach().clone(),
                               "A": inputs.advantages.clone(), "mask": inputs.mask.clone(),
                               "norm": float(inputs.token_normaliser), "loss": loss.item()})
            return loss, stats
        monkeypatch.setattr(algorithms, "policy_loss", spy)


def test_quickstart_dapo_acts_and_reports_through_trl_logging(tiny_model_dir, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "dropin")
    monkeypatch.chdir(tmp_path)   # MLflow's default artifact root (trl_config.json) is ./mlruns
    spy = _LossSpy(monkeypatch)
    # num_iterations=2: the second pass reuses the rollout, so the ratio moves and clips can bind
    args = _args(tmp_path, report_to="mlflow", num_iterations=2, learning_rate=0.05, max_completion_length=32)
    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[reward_num_unique_chars, solved], args=args,
                             train_dataset=_dataset(), method="dapo", correctness="solved")
    # DAPO's TRL-visible settings were written into the trainer's copy of the user's config
    assert (trainer.args.loss_type, trainer.args.epsilon, trainer.args.epsilon_high) == ("dapo", 0.2, 0.28)
    assert trainer.args.beta == 0.0 and trainer.args.mask_truncated_completions is True
    assert args.epsilon_high is None and args.mask_truncated_completions is False   # the user's object: untouched
    assert trainer.reward_func_names == ["reward_num_unique_chars", "solved", "overlong"]   # soft overlong
    trainer.train()
    history = trainer.state.log_history
    logged = {k: v for entry in history for k, v in entry.items()}

    # asymmetric clip bounds: the logged fractions are those of 1 - 0.2 and 1 + 0.28
    ratio = [torch.exp(c["logp"] - c["old"]) for c in spy.calls]
    def fraction(test):
        hits = sum(float((test(r, c["A"].unsqueeze(1)) * c["mask"]).sum()) for r, c in zip(ratio, spy.calls))
        return hits / sum(float(c["mask"].sum()) for c in spy.calls)
    high = fraction(lambda r, A: (r > 1.28) & (A > 0))
    low = fraction(lambda r, A: (r < 0.8) & (A < 0))
    assert logged["clip/high_fraction"] == pytest.approx(high, abs=1e-6)
    assert logged["clip/low_fraction"] == pytest.approx(low, abs=1e-6)
    symmetric_high = fraction(lambda r, A: (r > 1.2) & (A > 0))
    assert symmetric_high > high      # tokens between 1.2 and 1.28 were not clipped: eps_high acted
    # token-level aggregation: the first (on-policy) pass's loss is -sum_i A_i |o_i| / tokens
    first = spy.calls[0]
    lengths = first["mask"].sum(1)
    token_mean = -float((first["A"] * lengths).sum()) / first["norm"]
    seq_mean = -float(first["A"].mean())
    assert first["loss"] == pytest.approx(token_mean, abs=1e-6) and abs(token_mean - seq_mean) > 1e-3

    # dynamic sampling refilled the batch: every round generates the batch's groups again
    rounds = logged["sampling/rounds"]
    assert rounds >= 2 and logged["sampling/kept_fraction"] == pytest.approx(1 / rounds)
    assert logged["sampling/discarded_tokens"] > 0
    assert logged["groups/all_wrong"] > 0 and logged["trained/groups/all_wrong"] <= logged["groups/all_wrong"]

    # grpolab curves are in TRL's log history and in the MLflow run report_to="mlflow" created
    curves = {"entropy", "accuracy", "length/correct", "length/incorrect", "groups/zero_variance",
              "groups/all_correct", "clip/high_fraction", "clip/low_fraction", "tokens/cumulative",
              "trained/entropy", "rewards/overlong/mean", "override/loss", "time/generation_s", "time/scoring_s",
              "time/update_s", "time/generated_tokens_per_s", "time/accelerator_hours"}   # step_times.StepTimes
    assert curves <= set(logged)
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("dropin").experiment_id])
    assert curves <= set(run.data.metrics)
    assert run.data.metrics["clip/high_fraction"] == pytest.approx(logged["clip/high_fraction"], rel=1e-6)
    assert run.data.tags["grpolab.method"] == "dapo" and run.data.tags["grpolab.seed"] == "0"
    assert run.data.tags["grpolab.spec_hash"] == trainer.spec.spec_hash()
    assert run.info.run_name == "dapo-s0" and run.data.params["method.eps_high"] == "0.28"   # as a CLI run


def test_grpo_matches_stock_trl_on_an_off_policy_step(tiny_model_dir, tmp_path):
    """Same seed, model and data: GrpoLabTrainer(method="grpo") and GRPOTrainer(loss_type="grpo")
    log the same loss and gradient norm at step 2. Step 1 is no test of the loss (ratio 1,
    zero-sum advantages and KL 0 give ~0 for any aggregation); with num_iterations=2 step 2
    reuses step 1's rollout after a large update, so the ratio, the clip and the KL all act."""
    from trl import GRPOTrainer
    logs = {}
    for name in ("stock", "grpolab"):
        args = _args(tmp_path / name, max_steps=2, loss_type="grpo", beta=0.04, use_bias_correction_kl=False,
                     num_iterations=2, learning_rate=0.05, max_completion_length=32)   # lengths vary: aggregations differ
        kw = dict(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars, args=args,
                  train_dataset=_dataset())
        trainer = GRPOTrainer(**kw) if name == "stock" else GrpoLabTrainer(**kw, method="grpo", correctness="answer")
        trainer.train()
        logs[name] = [e for e in trainer.state.log_history if "loss" in e and "train_runtime" not in e]
    stock, ours = logs["stock"][1], logs["grpolab"][1]
    assert stock["step"] == ours["step"] == 2
    assert abs(stock["loss"]) > 1e-3 and abs(stock["loss"]) > 10 * abs(logs["stock"][0]["loss"])   # informative
    assert ours["loss"] == pytest.approx(stock["loss"], rel=1e-5, abs=1e-7)
    assert ours["grad_norm"] == pytest.approx(stock["grad_norm"], rel=1e-5)
    assert ours["clip/region_fraction"] > 0     # grpolab's curves came along, and the clip bound
    print(f"step 1 loss {logs['stock'][0]['loss']:.3g}; step 2 loss stock {stock['loss']:.6g} grpolab {ours['loss']:.6g}, "
          f"grad_norm stock {stock['grad_norm']:.6g} grpolab {ours['grad_norm']:.6g}")


# -- bad input: each raises at construction, before any model loads --------------------------------

MISSING_MODEL = "/nonexistent/model/dir"   # loading it would fail differently: the check comes first


@pytest.mark.parametrize("method, match", [
    ("dapoo", r"unknown method 'dapoo' \(did you mean 'dapo'\?\); known: grpo, dr_grpo, dapo"),
    ({"name": "dapo", "eps_hi": 0.3}, r"'eps_hi' is not an axis; valid axes: advantage, "),
    ({"eps_high": 0.3}, r"needs 'name'"),
    (3, r"expected a registered name, a dict or a MethodSpec, got int"),
    ({"name": "dapo", "eps_high": -1.0}, r"eps_high"),
])
def test_bad_method_raises_before_the_model_loads(method, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        GrpoLabTrainer(model=MISSING_MODEL, reward_funcs=reward_num_unique_chars, args=_args(tmp_path),
                       train_dataset=_dataset(), method=method)


def _prepare(tmp_path, method, reward_funcs=(reward_num_unique_chars,), correctness=None, **setting):
    """What GrpoLabTrainer decides first thing (the checks, the spec, the warnings), no model
    loaded: (DropIn, {warning class name: [messages]})."""
    import warnings as w
    from grpolab.trainer.dropin import prepare
    with w.catch_warnings(record=True) as record:
        w.simplefilter("always")
        setup = prepare(MISSING_MODEL, list(reward_funcs), _args(tmp_path, **setting), _dataset(), method,
                        correctness, {})
    said = {}
    for x in record:
        said.setdefault(x.category.__name__, []).append(str(x.message))
    return setup, said


@pytest.mark.parametrize("setting, label, announced", [
    ({"loss_type": "grpo"}, "dapo + aggregation=seq_mean_token_mean", "loss_type='grpo' -> aggregation='seq_mean_token_mean'"),
    ({"beta": 0.1}, "dapo + kl_coef=0.1", "beta=0.1 -> kl_coef=0.1"),
    ({"epsilon_high": 0.4}, "dapo + eps_high=0.4", "epsilon_high=0.4 -> eps_high=0.4"),
    ({"scale_rewards": "none"}, "dapo + advantage=group_mean", "scale_rewards='none' -> advantage='group_mean'"),
    ({"multi_objective_aggregation": "normalize_then_sum"}, "dapo + advantage=decoupled",   # GDPO's advantage
     "multi_objective_aggregation='normalize_then_sum' -> advantage='decoupled'"),
    ({"delta": 3.0}, "dapo + surrogate=dual_clip", "delta=3.0 -> surrogate='dual_clip'"),   # c 3.0 = the default
])
def test_grpo_config_settings_override_the_method_announced_once(setting, label, announced, tmp_path):
    """A GRPOConfig field set away from its default and in conflict with ``method=`` becomes an axis
    override: one warning naming what trains, the run's method tag says the same, and the trainer's
    copy of the config keeps the user's value."""
    from grpolab.trainer.dropin import mlflow_tags
    setup, said = _prepare(tmp_path, "dapo", (reward_num_unique_chars, solved), "solved", **setting)
    assert said["MethodOverrideWarning"] == [
        f"GrpoLabTrainer: training {label}: GRPOConfig settings override method 'dapo': {announced}"]
    tags = mlflow_tags(setup.method_name, setup.spec, 0)
    assert tags["grpolab.method"] == label and tags["grpolab.method_base"] == "dapo"
    [(field, value)] = setting.items()
    assert getattr(setup.args, field) == value


def test_settings_that_cannot_act_are_announced_and_missing_sources_raise(tmp_path):
    setup, said = _prepare(tmp_path, "rloo", epsilon=0.3)   # REINFORCE has no clip: TRL's epsilon cannot act
    assert setup.spec == _prepare(tmp_path, "rloo")[0].spec
    [note] = said["MethodOverrideWarning"]
    assert "training rloo: GRPOConfig settings override method 'rloo': epsilon=0.3 cannot act under this method's axes" in note
    setup, said = _prepare(tmp_path, "gspo", steps_per_generation=3)   # the user's rollout reuse wins
    assert setup.args.steps_per_generation == 3
    assert "steps_per_generation=3 (method 'gspo': 2 optimizer steps per rollout" in said["MethodOverrideWarning"][0]
    kw = dict(model=MISSING_MODEL, reward_funcs=reward_num_unique_chars, train_dataset=_dataset())
    with pytest.raises(ValueError, match=r"positive_lm_coef=0.1 .* needs correctness="):
        GrpoLabTrainer(**kw, args=_args(tmp_path), method="vapo")
    with pytest.raises(ValueError, match=r"'score' is neither a reward function \(reward_num_unique_chars\) "
                                         r"nor a column of train_dataset \(prompt, answer, solvable\)"):
        GrpoLabTrainer(**kw, args=_args(tmp_path), method="grpo", correctness="score")


def test_episode_axes_need_an_episode_rollout_and_refuse_length_axes_on_it(tmp_path):
    """GiGPO's step term (step_omega) and per-turn episode counting (episode_norm=step) act only on
    multi-turn episodes; on episodes, overlong filtering cannot act as meant. Raised at construction."""
    from grpolab.envs.trainer_rollout import EpisodeRollout
    from grpolab.tasks import make_task
    kw = dict(model=MISSING_MODEL, reward_funcs=reward_num_unique_chars, args=_args(tmp_path), train_dataset=_dataset())
    for method in ("gigpo", {"name": "grpo", "episode_norm": "step"}):
        with pytest.raises(ValueError, match=r"needs multi-turn episodes: pass rollout_func=EpisodeRollout"):
            GrpoLabTrainer(**kw, method=method)
    rollout = EpisodeRollout(make_task("gridworld"), [])
    with pytest.raises(ValueError, match=r"method.overlong_filter: TRL's truncation test .* sees only the last action"):
        GrpoLabTrainer(**kw, method={"name": "gigpo", "overlong_filter": True}, rollout_func=rollout)


class _OwnInputs:
    """A rollout_func that supplies estimator inputs of its own and plays no episodes (no ``task``)."""

    def __call__(self, prompts, trainer):
        raise AssertionError("not called: only the construction checks run")

    def advantage_inputs(self, spec, width, record_curve):
        return {}


def test_a_rollout_supplying_inputs_is_not_taken_for_an_episode_rollout(tmp_path):
    """Supplying ``advantage_inputs`` does not make a rollout an episode rollout: the drop-in's checks
    pass it under a single-turn method and refuse GiGPO's episode settings with it as without one."""
    from grpolab.trainer.dropin import prepare
    own = {"rollout_func": _OwnInputs()}
    setup = prepare(MISSING_MODEL, [reward_num_unique_chars], _args(tmp_path), _dataset(), "grpo", None, own)
    assert setup.spec.step_omega == 0
    for method in ("gigpo", {"name": "grpo", "episode_norm": "step"}):
        with pytest.raises(ValueError, match=r"needs multi-turn episodes: pass rollout_func=EpisodeRollout"):
            prepare(MISSING_MODEL, [reward_num_unique_chars], _args(tmp_path), _dataset(), method, None, own)


def test_registered_regime_and_overrides_reach_the_config(tiny_model_dir, tmp_path):
    t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars, args=_args(tmp_path),
                       train_dataset=_dataset(), method={"name": "gspo", "eps_high": 5e-4}, correctness="answer")
    assert (t.args.steps_per_generation, t.args.generation_batch_size) == (2, 16)   # GSPO reuses each rollout
    assert (t.args.importance_sampling_level, t.args.epsilon, t.args.epsilon_high) == ("sequence", 3e-4, 5e-4)
    assert t.spec.eps_high == 5e-4 and t.spec.ratio == "sequence"


def test_without_correctness_it_says_which_signal_stands_in(tiny_model_dir, tmp_path):
    from grpolab.trainer.dropin import MethodSettingsWarning
    with pytest.warns(UserWarning) as record:
        t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars, args=_args(tmp_path),
                           train_dataset=_dataset(), method={"name": "dapo", "max_sampling_rounds": 1})
    [stand_in] = [str(w.message) for w in record if "correctness=" in str(w.message)]   # one warning, not two
    assert "sampling_filter=reward" in stand_in and "length/above_group_mean" in stand_in
    [changed] = [str(w.message) for w in record if issubclass(w.category, MethodSettingsWarning)]
    assert "epsilon_high: None -> 0.28" in changed and "mask_truncated_completions: False -> True" in changed
    assert "loss_type" not in changed    # TRL's default is already dapo's
    assert t.spec.sampling_filter == "reward"
    t.model.train()
    ds = _dataset()
    out = t._generate_and_score_completions([dict(ds[i]) for i in (0, 1) for _ in range(4)])
    m = t._metrics["train"]
    assert "accuracy" not in m and "groups/all_correct" not in m and "length/correct" not in m
    rows = t._scored.rows
    total = t._scored.rewards.sum(1).view(-1, 4)
    above = (total > total.mean(1, keepdim=True)).view(-1)
    assert [r.correct for r in rows] == above.tolist()
    assert m["above_group_mean/fraction"][-1] == pytest.approx(above.float().mean().item())
    assert out["completion_ids"].size(0) == 8
    lengths = torch.tensor([r.length for r in rows], dtype=torch.float32)
    if above.any():
        assert m["length/above_group_mean"][-1] == pytest.approx(lengths[above].mean().item())
    assert not math.isnan(m["entropy"][-1])


# -- a reward function returning None (TRL's accuracy_reward when the gold answer does not parse) --------

def test_unscorable_completions_leave_the_baseline_and_get_zero_advantage():
    """TRL 1.16: r_i = nansum_k w_k r_i^k; a row every function skipped is NaN, out of the group's
    mean and std, advantage 0. Hand-computed: group 0 scorable totals 1, 3, 2 (mean 2, std 1)."""
    from grpolab import algorithms
    from grpolab.trainer.dropin import resolve_method
    nan = float("nan")
    rewards = torch.tensor([[1.0, nan], [nan, 3.0], [nan, nan], [1.0, 1.0],     # group 0: 1, 3, -, 2
                            [nan, nan], [nan, nan], [0.5, nan], [nan, nan]])    # group 1: one scorable row
    total = algorithms.combine_rewards(rewards, None)
    assert total[[0, 1, 3, 6]].tolist() == [1.0, 3.0, 2.0, 0.5] and total[[2, 4, 5, 7]].isnan().all()
    expected = {"grpo": [-1 / (1 + 1e-4), 1 / (1 + 1e-4), 0, 0], "dr_grpo": [-1, 1, 0, 0],
                "rloo": [1 - 2.5, 3 - 1.5, 0, 2 - 2]}
    for name, want in expected.items():
        _, spec, _ = resolve_method(name)
        a = algorithms.compute_advantages(spec, algorithms.AdvantageInputs(rewards, 4)).advantages
        assert a[:4].tolist() == pytest.approx(want, abs=1e-6), name
        assert a[4:].tolist() == [0.0] * 4, name    # a lone scorable row has no baseline to differ from
    _, reinforce, _ = resolve_method("reinforce_pp")
    with pytest.raises(ValueError, match=r"advantage=reinforce_pp: a reward function returned None .* group_std"):
        algorithms.compute_advantages(reinforce, algorithms.AdvantageInputs(rewards, 4, mask=torch.ones(8, 3)))


def sometimes_none(completions, **kwargs):
    """Like accuracy_reward on an unparsable gold answer: None for every other completion."""
    return [None if i % 2 else float(len(c) % 3) for i, c in enumerate(completions)]


def test_a_reward_returning_none_trains_like_stock_trl(tiny_model_dir, tmp_path):
    t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=sometimes_none, args=_args(tmp_path, max_steps=1),
                       train_dataset=_dataset(), method="grpo", correctness="answer")
    t.train()
    [log] = [e for e in t.state.log_history if "loss" in e]
    assert math.isfinite(log["loss"]) and math.isfinite(log["grad_norm"])
    assert math.isfinite(log["reward/mean"]) and log["reward/mean"] == pytest.approx(log["reward"], abs=1e-6)


# -- the user's GRPOConfig, method=, what the method changes, TRL's names ------------------------------

def test_without_method_it_trains_the_grpo_config_and_a_method_warns_its_defaults_once(tmp_path):
    import warnings as w
    from grpolab.trainer.dropin import MethodSettingsWarning, mlflow_tags
    setup, said = _prepare(tmp_path, None, loss_type="dr_grpo", epsilon_high=0.28, scale_rewards="none")
    assert setup.method_name == "trl:dr_grpo" and "MethodOverrideWarning" not in said and "MethodSettingsWarning" not in said
    spec = setup.spec
    assert (spec.aggregation, spec.advantage, spec.eps_low, spec.eps_high) == ("seq_mean_token_sum_norm", "group_mean", 0.2, 0.28)
    assert mlflow_tags(setup.method_name, spec, 0)["grpolab.method"] == "trl:dr_grpo"   # Clip-Higher: not grpolab's dr_grpo
    setup, _ = _prepare(tmp_path, None, loss_type="dr_grpo", scale_rewards="none")
    assert mlflow_tags(setup.method_name, setup.spec, 0)["grpolab.method"] == "dr_grpo"   # exactly the registered one
    kw = dict(model=MISSING_MODEL, reward_funcs=reward_num_unique_chars, train_dataset=_dataset())
    with w.catch_warnings(record=True) as record:
        w.simplefilter("always")
        with pytest.raises(Exception) as loading:   # the model path fails only after the checks and the warning
            GrpoLabTrainer(**kw, args=_args(tmp_path, beta=0.0), method="grpo", correctness="answer")
    assert "nonexistent" in str(loading.value)
    [changed] = [str(x.message) for x in record if issubclass(x.category, MethodSettingsWarning)]
    assert "beta: 0.0 -> 0.04" in changed and "loss_type: 'dapo' -> 'grpo'" in changed


def test_one_config_two_trainers_leaves_the_users_object_alone(tiny_model_dir, tmp_path):
    import copy
    import dataclasses
    args = _args(tmp_path, reward_weights=[1.0])
    before = copy.deepcopy(args)
    kw = dict(model=str(tiny_model_dir), reward_funcs=reward_num_unique_chars, args=args, train_dataset=_dataset(),
              method="dapo", correctness="answer")
    first, second = GrpoLabTrainer(**kw), GrpoLabTrainer(**kw)     # no spurious conflict the second time
    for f in dataclasses.fields(args):
        assert getattr(args, f.name) == getattr(before, f.name), f.name
        assert getattr(first.args, f.name) == getattr(second.args, f.name), f.name
    assert first.args.reward_weights == [1.0, 1.0] and first.spec.reward_weights == (1.0, 1.0)   # + overlong, once
    assert first.args.epsilon_high == 0.28 and args.epsilon_high is None


@pytest.mark.parametrize("method, field, value, announced", [
    ("grpo", "delta", 1.5, "delta=1.5 -> surrogate='dual_clip', dual_clip_c=1.5"),
    ("sapo", "sapo_temperature_neg", 2.0, "sapo_temperature_neg=2.0 -> sapo_tau_neg=2.0"),
    ("vespo", "vespo_k_pos", 5.0, "vespo_k_pos=5.0 -> vespo_k_pos=5.0"),
    ("grpo", "sapo_temperature_pos", 2.0, "sapo_temperature_pos=2.0 cannot act under this method's axes"),
    ("grpo", "vespo_lambda_neg", 5.0, "vespo_lambda_neg=5.0 cannot act under this method's axes"),
    ("grpo", "entropy_target", 0.5, "entropy_target=0.5 cannot act under this method's axes"),
])
def test_trl_loss_only_settings_map_to_axes_or_say_they_cannot_act(method, field, value, announced, tmp_path):
    _, said = _prepare(tmp_path, method, correctness="answer", **{field: value})
    [note] = said["MethodOverrideWarning"]
    assert announced in note


ADAPTIVE_TRL = dict(use_adaptive_entropy=True, entropy_coef=0.01, entropy_target=0.5, entropy_coef_delta=0.002,
                    entropy_coef_min=0.001, entropy_coef_max=0.1)
ADAPTIVE_AXES = dict(entropy_mode="adaptive_gated", entropy_coef=0.01, entropy_target=0.5, entropy_coef_step=0.002,
                     entropy_coef_min=0.001, entropy_coef_max=0.1)


def test_trl_adaptive_entropy_is_the_gated_adaptive_axis(tmp_path):
    """TRL's adaptive entropy control (no longer refused): entropy_mode=adaptive_gated and its bounds, without
    method= and as an override of a named method (trl parity: tests/algorithms/test_trl_parity.py)."""
    setup, _ = _prepare(tmp_path, None, **ADAPTIVE_TRL)
    assert {k: getattr(setup.spec, k) for k in ADAPTIVE_AXES} == ADAPTIVE_AXES
    setup, said = _prepare(tmp_path, "grpo", correctness="answer", **ADAPTIVE_TRL)
    assert {k: getattr(setup.spec, k) for k in ADAPTIVE_AXES} == ADAPTIVE_AXES
    [note] = said["MethodOverrideWarning"]
    assert "use_adaptive_entropy=True -> " in note and "entropy_mode='adaptive_gated'" in note
    with pytest.raises(NotImplementedError, match="top_entropy_quantile < 1"):
        _prepare(tmp_path, None, top_entropy_quantile=0.5, **ADAPTIVE_TRL)


@pytest.mark.parametrize("method", ["grpo", None])
def test_trl_off_policy_mask_is_trls_own_mask_in_grpolabs_loss(method, tmp_path):
    """off_policy_mask_threshold: passed through (TRL computes the mask, grpolab's loss applies it as TRL's does;
    parity in tests/algorithms/test_trl_parity.py), never refused."""
    from grpolab.trainer.trl_fields import TRL, TRL_FIELDS
    assert TRL_FIELDS["off_policy_mask_threshold"].kind == TRL
    setup, _ = _prepare(tmp_path, method, correctness="answer", off_policy_mask_threshold=0.5)
    assert setup.args.off_policy_mask_threshold == 0.5


def test_signature_and_reward_names_are_trls():
    import functools
    import inspect
    from trl import GRPOTrainer
    from grpolab.trainer.dropin import reward_func_names
    ours, trls = inspect.signature(GrpoLabTrainer).parameters, inspect.signature(GRPOTrainer).parameters
    assert list(ours) == [*trls, "method", "correctness"]
    assert ours["method"].default is None and ours["method"].kind is inspect.Parameter.KEYWORD_ONLY
    wrapped = functools.partial(functools.partial(solved, solvable=[True]))
    assert reward_func_names([wrapped, reward_num_unique_chars]) == ["solved", "reward_num_unique_chars"]


def test_reward_weights_meet_the_methods_in_one_place(tmp_path):
    """GRPOConfig.reward_weights and the CLI's task weights go through one helper
    (spec.with_reward_weights): the same rules, the same words."""
    kw = dict(model=MISSING_MODEL, reward_funcs=[reward_num_unique_chars, solved], train_dataset=_dataset(),
              correctness="solved")
    with pytest.raises(ValueError, match=r"method.reward_weights: \[1.0, 0.5\] conflicts with GRPOConfig.reward_weights "
                                         r"\[1.0, 2.0\]; set weights in one place"):
        GrpoLabTrainer(**kw, args=_args(tmp_path, reward_weights=[1.0, 2.0]),
                       method={"name": "grpo", "reward_weights": [1.0, 0.5]})
    with pytest.raises(ValueError, match=r"method.reward_weights: 2 weights for 3 reward components "
                                         r"\(reward_num_unique_chars, solved, overlong\)"):
        GrpoLabTrainer(**kw, args=_args(tmp_path, reward_weights=[1.0]), method="dapo")


def test_clip_cov_reads_the_users_clip_bounds(tmp_path):
    """Clip-Cov clips like PPO outside its selected tokens, so GRPOConfig's epsilon/epsilon_high are
    overrides of its eps_low/eps_high (they were announced as having no effect, then overwritten)."""
    setup, said = _prepare(tmp_path, "clip_cov", correctness="answer", epsilon=0.3, epsilon_high=0.35)
    assert (setup.spec.eps_low, setup.spec.eps_high) == (0.3, 0.35)
    assert (setup.args.epsilon, setup.args.epsilon_high) == (0.3, 0.35)
    [note] = said["MethodOverrideWarning"]
    assert "epsilon=0.3 -> eps_low=0.3" in note and "no effect" not in note
