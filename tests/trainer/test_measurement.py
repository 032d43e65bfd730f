"""Issue 10: every ablation measures what its rung claims. Each test fails on the code before the
fix (commit 8b366f8) and asserts numbers."""

import math

import pytest
import torch
from mlflow.tracking import MlflowClient

from grpolab.experiment.config import build_config
from grpolab.tracking.recorder import tracking_uri
from conftest import run_study_data, tiny_dataset


def _random_init_cfg(name, task, **train):
    return build_config({
        "name": name, "method": "grpo", "task": task, "model": {"preset": "tiny"},
        "warm_start": {"enabled": False},
        "train": {"steps": 1, "group_size": 4, "prompts_per_rollout": 4, **train},
        "eval": {"every": 0, "prompts": 8, "k": 2}, "tracking": {"flush_every": 1}})


# -- 1. the held-out eval samples at the run's training cap --------------------------------------

def test_eval_uses_the_training_completion_cap_and_logs_it(shared_state):
    from grpolab.experiment.runner import run_experiment
    cfg = _random_init_cfg("evalcap", {"name": "addition_scratchpad", "digits": 2}, max_completion_length=6)
    assert cfg.eval.max_completion_length == 6          # resolved from the training cap
    result = run_experiment(cfg, shared_state)
    run = MlflowClient(tracking_uri(shared_state)).get_run(result.run_id)
    assert run.data.params["eval.max_completion_length"] == "6"
    # a random-init model rarely stops early: at the task's own cap (44) its mean length was ~40
    assert 1 <= result.final_eval["eval/mean_length"] <= 6
    explicit = _random_init_cfg("evalcap2", {"name": "addition_scratchpad", "digits": 2}, max_completion_length=6)
    assert explicit.eval.max_completion_length == 6
    override = build_config({**{"name": "o", "task": {"name": "addition_scratchpad", "digits": 2}},
                             "train": {"max_completion_length": 6}, "eval": {"max_completion_length": 9}})
    assert override.eval.max_completion_length == 9


# -- 5. the top-entropy mask selects policy-gradient tokens only; the in-loss KL stays on all ----

def test_top_entropy_mask_keeps_the_in_loss_kl_on_every_token():
    from grpolab.algorithms import LossInputs, policy_loss
    from grpolab.method.spec import build_spec
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5, 0.125]]))
    ref = torch.log(torch.tensor([[0.25, 0.25, 0.5, 0.25]]))
    mask, ent = torch.ones(1, 4), torch.tensor([[0.9, 0.1, 0.2, 0.8]])   # top half: tokens 0 and 3
    s = build_spec({"top_entropy_quantile": 0.5, "kl_coef": 0.1, "kl_estimator": "k1",
                    "aggregation": "token_mean_local"})
    A = torch.tensor([1.0])
    loss, stats = policy_loss(s, LossInputs(logp, logp.detach(), A, mask, ref, entropies=ent))
    # on-policy: surrogate -A * 1 on the 2 kept tokens; k1 KL x = logp - ref = (ln2, 0, 0, -ln2) on all 4
    kl = [math.log(2), 0.0, 0.0, -math.log(2)]
    expected = (-1.0 * 2 + 0.1 * sum(kl)) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    # the gradient of the KL reaches the masked tokens 1 and 2 (coefficient 0.1 / 4 each)
    lp = logp.clone().requires_grad_(True)
    policy_loss(s, LossInputs(lp, lp.detach(), torch.tensor([0.0]), mask, ref, entropies=ent))[0].backward()
    assert lp.grad.flatten().tolist() == pytest.approx([0.025] * 4, abs=1e-6)
    assert stats["entropy/kept_fraction"] == pytest.approx(0.5)


# -- trainer helpers ------------------------------------------------------------------------------

def _trainer(model, tmp_path, spec, rewards, task=None, rollout_func=None, **kw):
    from trl import GRPOConfig

    from conftest import tiny_dataset
    from grpolab.trainer.dropin import task_correctness
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    from grpolab.world.models import load_model
    base_task, train, ds = tiny_dataset(128)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=5, use_cpu=True, disable_tqdm=True, top_k=0, seed=0, **kw)
    _, tok = load_model(model if isinstance(model, str) else model.config._name_or_path)
    t = GrpoLabTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=ds, processing_class=tok,
                       method=spec, correctness=task_correctness(task or base_task, train), rollout_func=rollout_func)
    t.model.train()
    return t, train


# -- 4. reward weights are applied once when the KL goes into the reward --------------------------

def test_weighted_rewards_with_kl_in_reward_match_hand_computed_advantages(tiny_model_dir, tmp_path):
    from grpolab.method.spec import build_spec
    from grpolab.world.models import load_model
    model, _ = load_model(tiny_model_dir)
    with torch.no_grad():   # the policy drifts from the reference (re-loaded from disk): the KL is not 0
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))

    def first(prompts, completions, idx, **kw):
        return [float(j % 3) for j in range(len(prompts))]

    def second(prompts, completions, idx, **kw):
        return [float(len(c) % 2) for c in completions]
    spec = build_spec({"advantage": "group_mean", "surrogate": "clip", "kl_coef": 0.1, "kl_estimator": "k1",
                       "kl_placement": "reward", "reward_weights": [1.0, 0.5]})
    t, train = _trainer(model, tmp_path, spec, [first, second])
    penalties = []
    original = t._token_kl_penalty
    t._token_kl_penalty = lambda out, mask: penalties.append(original(out, mask)) or penalties[-1]
    out = t._generate_and_score_completions([{"prompt": train[i].prompt, "idx": i} for i in (0, 1) for _ in range(4)])
    r = t._scored.rewards                                   # (8, 2) components, as TRL gathered them
    seq_pen = (penalties[0] * out["completion_mask"]).sum(-1)
    assert seq_pen.abs().max() > 1e-3                          # the reward-side KL is really there
    total = r[:, 0] * 1.0 + r[:, 1] * 0.5 - seq_pen
    expected = (total.view(2, 4) - total.view(2, 4).mean(1, keepdim=True)).view(-1)
    assert out["advantages"].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert expected.abs().max() > 0.1


# -- 2. dynamic sampling filters on accuracy (DAPO), or on the reward when asked ------------------

class _ParityTask:
    """Correct on every other completion of even-indexed prompts, never on odd ones."""

    def __init__(self, base, train):
        self.base, self.index, self.calls = base, {e.prompt: i for i, e in enumerate(train)}, 0

    def __getattr__(self, name):
        return getattr(self.base, name)

    def is_correct(self, example, completion):
        self.calls += 1
        return self.index[example.prompt] % 2 == 0 and self.calls % 2 == 0


def _shaped(prompts, completions, idx, **kw):
    # correctness plus a length-like shaping term that differs inside every group
    return [0.01 * j for j in range(len(prompts))]


@pytest.mark.parametrize("filter_metric", ["accuracy", "reward"])
def test_dynamic_sampling_filters_on_accuracy_by_default(filter_metric, tiny_model_dir, tmp_path):
    from grpolab.method.registry import get_method
    overrides = {"soft_overlong": False, "overlong_filter": False, "max_sampling_rounds": 12}
    if filter_metric == "reward":
        overrides["sampling_filter"] = "reward"
    spec = get_method("dapo").spec(overrides)
    base, examples, _ = tiny_dataset(128)
    parity = _ParityTask(base, examples)                             # the correctness source
    t, train = _trainer(str(tiny_model_dir), tmp_path, spec, [_shaped], task=parity)
    t._generate_and_score_completions([{"prompt": train[i].prompt, "idx": i} for i in (0, 1) for _ in range(4)])
    kept = [parity.index[r["prompt"]] for r in t.last_rollout]
    m = t._metrics["train"]
    if filter_metric == "accuracy":
        assert len(kept) == 8 and all(i % 2 == 0 for i in kept)     # the all-wrong group is dropped
        assert m["trained/groups/all_wrong"][-1] == 0.0 and m["trained/groups/all_correct"][-1] == 0.0
        assert m["groups/all_wrong"][-1] > 0                          # generated, then dropped
        assert m["sampling/rounds"][-1] >= 2
    else:                                                             # verl: the shaped reward varies
        assert sorted(set(kept)) == [0, 1] and m["sampling/rounds"][-1] == 1.0
        assert m["trained/groups/all_wrong"][-1] == 0.5               # from correctness, not the reward
        assert m["groups/zero_variance"][-1] == 0.0
    assert spec.sampling_filter == filter_metric


def test_group_curves_count_correctness_whatever_the_shaping():
    from grpolab.trainer.metrics import rollout_metrics
    rewards = torch.tensor([0.0, -0.2, -0.5, 0.0, 1.0, 1.0, 1.0, 0.9])   # shaped: no group is zero-variance
    correct = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]).bool()
    stats = rollout_metrics(rewards, correct, torch.full((8,), 3.0), torch.zeros(8).bool(), 4)
    assert stats["groups/zero_variance"] == 0.0
    assert stats["groups/all_wrong"] == 0.5 and stats["groups/all_correct"] == 0.5


# -- 9. one objective function for the table, the trial value and the pruner ----------------------

def test_objectives_by_hand_on_full_and_partial_histories():
    from grpolab.errors import ConfigError
    from grpolab.studies.objectives import objective_value
    evals = {0: {"eval/pass_at_1": 0.2}, 10: {"eval/pass_at_1": 0.28}, 20: {"eval/pass_at_1": 0.31}, 30: {"eval/pass_at_1": 0.29}}
    curves = {"tokens/cumulative": [(s, 100.0 * s) for s in (1, 3, 5, 7, 9, 11, 13, 15, 17, 19)],
              "entropy": [(2, 1.0), (4, 2.0), (6, 3.0), (8, float("nan")), (10, 5.0), (12, 6.0), (14, 7.0), (16, 8.0)]}
    upto20 = {s: v for s, v in evals.items() if s <= 20}
    assert objective_value("auc:eval/pass_at_1", upto20, curves) == pytest.approx((0.24 + 0.295) * 10 / 20)
    assert objective_value("steps_to:eval/pass_at_1>=0.3", {0: evals[0], 10: evals[10]}, curves) == math.inf
    assert objective_value("steps_to:eval/pass_at_1>=0.3", evals, curves) == 20.0
    assert objective_value("tokens_to:eval/pass_at_1>=0.3", evals, curves) == 1900.0   # last point at or before 20
    assert objective_value("tokens_to:eval/pass_at_1>=0.1", evals, curves) == 0.0      # reached at step 0
    with pytest.raises(ConfigError, match="tokens/cumulative"):   # no token curve is an error, never 0 tokens
        objective_value("tokens_to:eval/pass_at_1>=0.3", evals, {})
    # tail: finite points at steps > 3/4 of the last step (16 -> steps 14, 16), NaN skipped
    assert objective_value("tail:entropy", evals, curves) == pytest.approx(7.5)
    partial = {k: [(s, v) for s, v in pts if s <= 10] for k, pts in curves.items()}
    assert objective_value("tail:entropy", upto20, partial) == pytest.approx(5.0)   # steps > 7.5: just 10


def test_search_on_tail_entropy_completes_and_prunes_on_the_same_function(tmp_path, shared_state):
    from optuna.trial import TrialState

    from grpolab.studies.objectives import objective_value
    base = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
            "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
            "train": {"group_size": 4, "prompts_per_rollout": 4}, "eval": {"prompts": 4, "k": 2}}
    data = {"kind": "search", "name": "search_tail_entropy", "base": base,
            "budget": {"train.steps": 4, "eval.every": 2}, "seeds": [0],
            "objectives": [{"metric": "tail:entropy", "direction": "maximize"}],
            "space": {"train.learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True}},
            "n_trials": 2, "sampler": {"name": "random", "seed": 0},
            "pruner": {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0}}
    _, study = run_study_data(tmp_path, data, shared_state, "s.yaml")
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 2 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    client = MlflowClient(tracking_uri(shared_state))
    first = trials[0]
    assert first.state == TrialState.COMPLETE
    history = sorted((m.step, m.value) for m in client.get_metric_history(first.user_attrs["mlflow_run_id"], "entropy"))
    assert first.value == pytest.approx(objective_value("tail:entropy", {}, {"entropy": history}), rel=1e-6)
    # the pruner saw the same function over the curve logged before each eval step
    assert first.intermediate_values[2] == pytest.approx(
        objective_value("tail:entropy", {}, {"entropy": [p for p in history if p[0] < 2]}), rel=1e-6)


# -- 3. every axis value declares what it needs; inert settings are warned, tagged and marked -----

def test_inert_settings_are_warned_once_and_named():
    from grpolab.method.requirements import inert_settings
    with pytest.warns(UserWarning) as record:
        on_policy = build_config({"name": "k", "method": {"base": "kl_cov"}, "train": {"minibatches": 1}})
    msgs = [str(w.message) for w in record if "inert" in str(w.message)]
    # kl_cov's own reason (it reads no eps), and its parameters, which act only through that penalty
    assert msgs == ["method.surrogate=kl_cov needs rollout reuse (off-policy updates) and is inert in this run: "
                    "on-policy |log ratio| = 0 and its gradient too; "
                    "set train.minibatches > 1 or train.num_iterations > 1",
                    "method.cov_fraction=0.002 needs surrogate clip_cov, or kl_cov with rollout reuse and is inert in "
                    "this run: set method.surrogate: clip_cov/kl_cov (kl_cov) and train.minibatches > 1 or "
                    "train.num_iterations > 1 (on-policy |log ratio| = 0 and its gradient too)"]
    assert inert_settings(on_policy) == ["surrogate=kl_cov", "cov_fraction=0.002"]
    reused = build_config({"name": "k", "method": {"base": "kl_cov"}, "train": {"minibatches": 2}})
    assert inert_settings(reused) == [] and not any("inert" in w for w in reused.warnings)
    grpo = build_config({"name": "g", "method": {"base": "grpo", "eps_high": 0.28, "kl_coef": 0.0,
                                                  "kl_estimator": "k1", "overlong_buffer": 3}})
    assert inert_settings(grpo) == ["surrogate=clip", "eps_high=0.28", "kl_estimator=k1", "overlong_buffer=3"]


def _inert_ladder(tmp_path):
    import yaml
    data = {"kind": "ladder", "name": "inert_ladder", "seeds": [0], "metric": "final:eval/pass_at_1",
            "base": {"method": {"name": "g", "advantage": "group_std", "surrogate": "clip", "kl_coef": 0.0},
                     "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                     "warm_start": {"enabled": False}, "train": {"group_size": 4, "prompts_per_rollout": 4},
                     "eval": {"prompts": 4, "k": 2}},
            "budget": {"train.steps": 1, "eval.every": 0},
            "rungs": [{"name": "base"}, {"name": "+ clip higher", "changes": {"method.eps_high": 0.28}},
                      {"name": "+ clip higher still", "changes": {"method.eps_high": 0.3}}]}
    path = tmp_path / "inert.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_ladder_marks_inert_rungs_before_running(tmp_path, shared_state):
    from grpolab.studies.definition import ladder_notes
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    from grpolab.studies.definition import load_study
    from conftest import REPO
    path = _inert_ladder(tmp_path)
    notes = ladder_notes(load_study(path))
    assert notes == [
        "rung 1 (+ clip higher): its change method.eps_high=0.28 is inert here: it needs surrogate clip, dual_clip, "
        "cispo, clip_cov, dppo_tv or dppo_kl with rollout reuse (set method.surrogate: "
        "clip/dual_clip/cispo/clip_cov/dppo_tv/dppo_kl and train.minibatches > 1 or train.num_iterations > 1)",
        "rung 2 (+ clip higher still): its change method.eps_high=0.3 is inert here: it needs surrogate clip, dual_clip, "
        "cispo, clip_cov, dppo_tv or dppo_kl with rollout reuse (set method.surrogate: "
        "clip/dual_clip/cispo/clip_cov/dppo_tv/dppo_kl and train.minibatches > 1 or train.num_iterations > 1)"]
    assert ladder_notes(load_study(REPO / "studies/dapo_table1.yaml")) == []   # reuses rollouts: every rung acts
    lines = []
    assert run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lines.append)) == 0
    assert lines[0] == "ladder check: 2 finding(s)" and lines[1:3] == [f"  ! {n}" for n in notes]
    assert lines[3].startswith("rows 0/3")                      # the check comes before any row runs
    client = MlflowClient(tracking_uri(shared_state))
    exp = client.get_experiment_by_name("inert_ladder")   # a study's own MLflow experiment, named after it
    tags = {r.data.tags.get("grpolab.rung_name"): r.data.tags.get("grpolab.inert")
            for r in client.search_runs([exp.experiment_id], "tags.`grpolab.study` = 'inert_ladder'")}
    assert tags["+ clip higher"] == "surrogate=clip,eps_high=0.28" and tags["base"] == "surrogate=clip"


# -- 8. several processes: global statistics, one MLflow run, one eval ---------------------------

def _launch(nproc, port, args, env_extra=None):
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}   # PYTHONPATH: conftest's, the caller's kept
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                           "--master_port", str(port), *args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_two_processes_match_one_process_on_the_same_data(tiny_model_dir, tmp_path):
    import json

    from conftest import REPO
    script = str(REPO / "tests/scripts/loss_equivalence.py")
    out = {}
    for nproc, port in ((1, 29571), (2, 29572)):
        _launch(nproc, port, [script, str(tiny_model_dir), str(tmp_path / f"p{nproc}.json")])
        out[nproc] = json.loads((tmp_path / f"p{nproc}.json").read_text())
    one, two = out[1], out[2]
    assert one["world"] == 1 and two["world"] == 2
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-3, abs=1e-6)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-3)
    keys = set(one["stats"]) - {"override/loss"}
    assert keys == set(two["stats"]) - {"override/loss"}
    assert {"clip/region_fraction", "clip/dual_fraction", "trained/entropy", "entropy/kept_fraction",
            "entropy_coef"} <= keys
    for key in keys:   # per-rank statistics would differ: each rank holds half the rows
        assert two["stats"][key] == pytest.approx(one["stats"][key], rel=1e-3, abs=1e-6), key
    assert one["stats"]["clip/region_fraction"][0] > one["stats"]["clip/high_fraction"][0] > 0


def test_two_process_run_records_one_mlflow_run_with_one_eval_series(tmp_path):
    import yaml
    exp = {"name": "two_proc", "method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
           "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
           "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2},
           "eval": {"every": 1, "prompts": 4, "k": 2}, "tracking": {"flush_every": 1}}
    path, state = tmp_path / "exp.yaml", tmp_path / "state"
    path.write_text(yaml.safe_dump(exp))
    _launch(2, 29573, ["-m", "grpolab.cli", "--state", str(state), "run", str(path)])
    client = MlflowClient(tracking_uri(state))
    runs = client.search_runs([client.get_experiment_by_name("grpolab").experiment_id])
    assert [(r.info.run_name, r.info.status) for r in runs] == [("two_proc-s0", "FINISHED")]
    evals = client.get_metric_history(runs[0].info.run_id, "eval/pass_at_1")
    assert sorted(m.step for m in evals) == [0, 1, 2]             # once per eval point, not once per rank
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "clip/region_fraction")] == [2]


# -- the metric doc defines every key a real run logs ---------------------------------------------

def test_metric_doc_defines_every_key_of_a_real_run(shared_state):
    from grpolab.experiment.runner import run_experiment
    cfg = build_config({"name": "allkeys", "method": {"base": "dapo", "max_sampling_rounds": 2,
                                                       "top_entropy_quantile": 0.5, "entropy_mode": "adaptive"},
                        "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                        "warm_start": {"enabled": False},
                        "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 4, "minibatches": 2},
                        "eval": {"every": 0, "prompts": 4, "k": 2}, "tracking": {"flush_every": 1}})
    import warnings
    with warnings.catch_warnings(record=True) as caught:   # checked after: a failing run surfaces as itself
        warnings.simplefilter("always")
        result = run_experiment(cfg, shared_state)
    # random init: no informative group, the cap fills in
    assert any("zero-variance fill-ins" in str(w.message) for w in caught), [str(w.message) for w in caught]
    keys = set(MlflowClient(tracking_uri(shared_state)).get_run(result.run_id).data.metrics)
    assert {"sampling/rounds", "trained/entropy", "entropy", "clip/region_fraction", "rewards/overlong/mean",
            "entropy/kept_fraction", "entropy_coef", "eval/pass_at_1", "loss", "grad_norm"} <= keys
    assert undefined_keys(keys) == []
    assert undefined_keys(keys | {"made/up"}) == ["made/up"]


# -- 6. VAPO's switches: positive-example LM loss, value clipping, advantage whitening ------------

def test_positive_example_lm_loss_by_hand():
    from grpolab.algorithms import LossInputs, policy_loss
    from grpolab.method.spec import build_spec
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5], [0.125, 0.5, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    s = build_spec({"aggregation": "token_mean_local", "positive_lm_coef": 0.1})
    loss, stats = policy_loss(s, LossInputs(logp, logp.detach(), torch.zeros(2), mask, positive=torch.tensor([True, False])))
    nll = (math.log(2) + math.log(4)) / 2                       # the correct row's 2 valid tokens
    assert stats["lm/positive_nll"] == pytest.approx(nll)
    assert loss.item() == pytest.approx(0.1 * nll, abs=1e-6)    # A = 0: only the LM term is left


def test_value_clipping_and_advantage_whitening_by_hand():
    from grpolab.algorithms import AdvantageInputs, compute_advantages
    from grpolab.trainer.critic import value_loss
    from grpolab.method.spec import build_spec
    values, old, returns = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 1.0]])
    mask = torch.ones(1, 2)
    assert value_loss(values, returns, mask).item() == pytest.approx(0.5 * (1 + 1) / 2)
    # clip 0.2: V' = (0.2, 0); per token max((V-R)^2, (V'-R)^2) = max(1, 3.24), max(1, 1)
    assert value_loss(values, returns, mask, old, 0.2).item() == pytest.approx(0.5 * (3.24 + 1) / 2)
    s = build_spec({"advantage": "gae", "gae_lambda": 1.0, "whiten_advantages": True})
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    zero_critic = AdvantageInputs(torch.tensor([1.0, 0.0]), 2, mask=m, old_values=torch.zeros(2, 3))
    A = compute_advantages(s, zero_critic).advantages
    valid = A[m.bool()]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-6) and valid.std().item() == pytest.approx(1.0, abs=1e-4)
    raw = compute_advantages(build_spec({"advantage": "gae", "gae_lambda": 1.0}), zero_critic).advantages
    assert raw[m.bool()].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    from grpolab.method.registry import get_method
    assert get_method("vapo").spec().positive_lm_coef == 0.1


def test_vapo_trains_with_every_switch(tiny_model_dir, tmp_path):
    from grpolab.method.registry import get_method
    spec = get_method("vapo").spec({"critic_warmup": 0, "value_clip": 0.2, "whiten_advantages": True,
                                    "gae_length_alpha": 1.0})
    base, examples, _ = tiny_dataset(128)
    parity = _ParityTask(base, examples)
    parity.index = {p: 0 for p in parity.index}                # every prompt: half of its completions correct
    t, train = _trainer(str(tiny_model_dir), tmp_path, spec, [lambda prompts, completions, **kw: [
        float(j % 2) for j in range(len(prompts))]], task=parity, max_steps=2, steps_per_generation=2, logging_steps=1)
    t.train()
    logged = {k for entry in t.state.log_history for k in entry}
    assert {"lm/positive_nll", "critic/value_loss", "clip/region_fraction"} <= logged


# -- the entropy curve: the loss's own forward when it sees every generated token under pi_old -----

def _two_turns(prompts, trainer):
    """A user's multi-turn text without env_mask: 3 to 6 tokens, the first turn ending in EOS at 3."""
    eos = trainer.eos_token_ids[0]
    ids = [[5 + j % 7, 6, eos, 7, 8 + j % 3, eos][: 3 + j % 4] for j in range(len(prompts))]
    return {"prompt_ids": [[5, 6, 7]] * len(prompts), "completion_ids": ids, "logprobs": [[0.0] * len(c) for c in ids]}


@pytest.mark.parametrize("reuse, pad_to, rollout", [(False, None, None), (True, None, None), (False, 8, None),
                                                    (False, None, _two_turns)])
def test_entropy_curve_is_the_same_whether_or_not_the_loss_forward_supplies_it(tiny_model_dir, tmp_path, reuse,
                                                                               pad_to, rollout):
    """Static sampling, one pass, one optimizer step per generation: the loss's token-weighted
    entropy is pi_old's over every generated token, so the extra forward is skipped; the curve
    must equal the extra forward's, step by step. With rollout reuse (2 passes) the loss sees
    updated weights, so the extra forward must run. ``pad_to_multiple_of`` 8 over completions
    capped at 5 tokens: a truncated row's padding (pad id not an EOS id) is in neither population; a
    rollout_func's completion with an EOS inside counts whole in both."""
    from grpolab.method.spec import build_spec

    def coin(prompts, completions, idx, **kw):
        return [float((len(c) + j) % 2) for j, c in enumerate(completions)]
    curves, forwards = {}, {}
    for deferred in (True, False):
        t, _ = _trainer(str(tiny_model_dir), tmp_path / str(deferred), build_spec({"kl_coef": 0.0}), [coin],
                        max_steps=4, logging_steps=1, learning_rate=0.05, num_iterations=2 if reuse else 1,
                        pad_to_multiple_of=pad_to, rollout_func=rollout)
        forwards[deferred] = []
        def counted(out, calls=forwards[deferred], original=t._entropy_sums):   # (its tokens, the loss's)
            sums = original(out)
            calls.append((int(sums[1]), int(out["completion_mask"].sum())))
            return sums
        t._entropy_sums = counted
        if not deferred:
            t._loss_sees_pi_old_on_every_token = lambda out: False
        t.train()
        curves[deferred] = {key: [(h["step"], h[key]) for h in t.state.log_history if key in h]
                            for key in ("entropy", "trained/entropy")}
    generations = 2 if reuse else 4
    if pad_to:   # the case needs truncated rows, whose padding the old EOS-derived population counted
        assert t.processing_class.pad_token_id not in t.eos_token_ids
        assert max(h.get("length/truncated_fraction", 0) for h in t.state.log_history) > 0
    assert (len(forwards[True]), len(forwards[False])) == ((generations, generations) if reuse else (0, generations))
    assert all(mine == loss for mine, loss in forwards[True] + forwards[False]), forwards   # one token population
    for key in ("entropy", "trained/entropy"):
        assert [s for s, _ in curves[True][key]] == [s for s, _ in curves[False][key]] and len(curves[True][key]) >= 2
        assert [v for _, v in curves[True][key]] == pytest.approx([v for _, v in curves[False][key]], rel=1e-5)
    if not reuse:   # every generated token trained under pi_old: the two curves are one
        assert [v for _, v in curves[True]["entropy"]] == pytest.approx(
            [v for _, v in curves[True]["trained/entropy"]], rel=1e-6)


@pytest.mark.parametrize("overlong_filter", [False, True])
def test_entropy_curve_from_trls_old_log_prob_pass_equals_its_own_forward(tiny_model_dir, tmp_path, overlong_filter):
    """With rollout reuse TRL forwards pi_old for the old log-probs; the entropy curve takes its
    values from that pass instead of a second forward. Truncated rows, whose attention TRL zeroes
    under the overlong filter, are forwarded again alone: the curve must equal the one from a
    whole second forward, and the captured pass must have been used (fewer forwarded rows)."""
    from trl import GRPOTrainer

    from grpolab.method.spec import build_spec

    def coin(prompts, completions, idx, **kw):
        return [float((len(c) + j) % 2) for j, c in enumerate(completions)]
    curves, forwarded = {}, {}
    for captured in (True, False):
        spec = build_spec({"kl_coef": 0.0, "overlong_filter": overlong_filter})
        t, _ = _trainer(str(tiny_model_dir), tmp_path / str(captured), spec, [coin], max_steps=4, logging_steps=1,
                        learning_rate=0.05, num_iterations=2)
        rows = forwarded[captured] = []
        original = t._get_per_token_logps_and_entropies

        def counted(model, input_ids, *args, original=original, rows=rows, **kwargs):
            if kwargs.get("compute_entropy") and not torch.is_grad_enabled():   # the curve's own forward
                rows.append(input_ids.size(0))
            return original(model, input_ids, *args, **kwargs)
        t._get_per_token_logps_and_entropies = counted
        if not captured:
            t._trl_round = lambda inputs, t=t: GRPOTrainer._generate_and_score_completions(t, inputs)
        t.train()
        curves[captured] = [(h["step"], h["entropy"]) for h in t.state.log_history if "entropy" in h]
    assert len(curves[True]) >= 2 and [s for s, _ in curves[True]] == [s for s, _ in curves[False]]
    assert [v for _, v in curves[True]] == pytest.approx([v for _, v in curves[False]], rel=1e-5)
    assert forwarded[False] == [8, 8] and sum(forwarded[True]) < 16   # 2 generations of 8 rows
    if overlong_filter:   # the truncated rows only, in the rounds that had any
        assert forwarded[True] and all(0 < n <= 8 for n in forwarded[True])
    else:
        assert forwarded[True] == []


def undefined_keys(keys) -> list[str]:
    """Logged metric names (as MLflow stores them) that no stored record of the catalog covers
    (``<...>`` in a record's name stands for one path segment)."""
    from grpolab.tracking.metric_catalog import lookup
    return sorted(k for k in keys if lookup(k) is None or not lookup(k).stored)


def test_rollout_and_loss_curves_share_their_steps_with_minibatches(tmp_path):
    """minibatches: 2 (two updates per rollout): every training curve -- rollout-side (entropy,
    length, groups, reward) and loss-side (clip, loss) -- is one point per rollout, on steps 2, 4,
    6, so overlaid charts line up; the logged values are means over the rollout's two updates."""
    import warnings

    from grpolab.experiment.runner import run_experiment
    raw = {"name": "aligned", "method": "grpo", "task": {"name": "random_reward"}, "model": {"preset": "tiny"},
           "warm_start": {"enabled": False}, "eval": {"every": 0, "prompts": 4, "k": 1},
           "train": {"steps": 6, "minibatches": 2, "group_size": 4, "prompts_per_rollout": 4, "learning_rate": 0.001},
           "tracking": {"experiment": "aligned"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = build_config(raw)
    result = run_experiment(cfg, tmp_path)
    client = MlflowClient(tracking_uri(tmp_path))
    keys = [k for k in client.get_run(result.run_id).data.metrics if not k.startswith(("eval/", "system/"))]
    assert {"entropy", "length/mean", "clip/high_fraction", "loss", "reward/mean"} <= set(keys), keys
    steps = {k: sorted(m.step for m in client.get_metric_history(result.run_id, k)) for k in keys}
    from grpolab.tracking.metric_catalog import lookup   # a curve the evaluations log is on their steps, 0 and 6
    at_evals = {k for k in keys if "each held-out evaluation" in lookup(k).when}
    assert at_evals == {"policy/param_change"} and steps["policy/param_change"] == [0, 6]
    assert {k: s for k, s in steps.items() if s != [2, 4, 6] and k not in at_evals} == {}
    inputs = client.get_run(result.run_id).inputs.dataset_inputs   # MLflow's Datasets column
    assert sorted((i.dataset.name, i.tags[0].value) for i in inputs) == [
        ("random_reward-held-out", "evaluation"), ("random_reward-train", "training")]
    assert '"num_rows": 4' in next(i.dataset.profile for i in inputs if i.dataset.name == "random_reward-held-out")
    with pytest.raises(Exception, match="train.steps: must be a multiple of minibatches x num_iterations = 2"):
        build_config({**raw, "train": {**raw["train"], "steps": 5}})
