"""Dynamic sampling and zero-variance filtering: cap policy, re-padding, normaliser, 2 processes."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, tiny_dataset
from grpolab.algorithms.sampling_options import SamplingCapError
from grpolab.trainer import sampling
from grpolab.trainer.rollouts import RolloutRow
from grpolab.method.registry import get_method
from grpolab.method.spec import build_spec


def test_select_groups_informative_first_then_cap_policies():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])  # groups: mixed, all-1, all-0, mixed
    groups, filled = sampling.select_groups(r, 2, 2, "fail")
    assert groups.tolist() == [0, 3] and filled == 0
    groups, filled = sampling.select_groups(r, 2, 3, "fill")
    assert groups.tolist() == [0, 3, 1] and filled == 1
    with pytest.raises(SamplingCapError, match="found 2 informative groups of 3"):
        sampling.select_groups(r, 2, 3, "fail")
    assert sampling.rows_of_groups(torch.tensor([0, 3]), 2).tolist() == [0, 1, 6, 7]


def test_concat_repads_prompts_left_and_completions_right():
    a = {"prompt_ids": torch.tensor([[5, 6]]), "prompt_mask": torch.tensor([[1, 1]]),
         "completion_ids": torch.tensor([[7, 8, 2]]), "completion_mask": torch.tensor([[1, 1, 1]]),
         "num_items_in_batch": torch.tensor(3), "advantages": torch.zeros(1)}
    b = {"prompt_ids": torch.tensor([[5, 6, 7]]), "prompt_mask": torch.tensor([[1, 1, 1]]),
         "completion_ids": torch.tensor([[2]]), "completion_mask": torch.tensor([[1]]),
         "num_items_in_batch": torch.tensor(1), "advantages": torch.zeros(1)}
    m = sampling.concat_batches([a, b], pad_token_id=0)
    assert m["prompt_ids"].tolist() == [[0, 5, 6], [5, 6, 7]] and m["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert m["completion_ids"].tolist() == [[7, 8, 2], [2, 0, 0]]
    assert m["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    only_b = sampling.take_rows(m, torch.tensor([1]))
    assert only_b["completion_ids"].tolist() == [[2]] and only_b["prompt_ids"].tolist() == [[5, 6, 7]]


def _trainer(tiny_model_dir, tmp_path, spec, reward, **kw):
    from trl import GRPOConfig

    from grpolab.trainer.dropin import task_correctness
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    from grpolab.world.models import load_model
    task, train, ds = tiny_dataset(128)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=5, use_cpu=True, disable_tqdm=True, top_k=0, seed=0, **kw)
    _, tok = load_model(tiny_model_dir)
    t = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[reward], args=args, train_dataset=ds,
                       processing_class=tok, method=spec, correctness=task_correctness(task, train))
    t.model.train()
    return t, train


def _even_informative(prompts, completions, idx, **kw):
    return [float(j % 2) if i % 2 == 0 else 1.0 for j, i in enumerate(idx)]


def test_dynamic_sampling_fills_batch_with_informative_groups_and_recounts_tokens(tiny_model_dir, tmp_path):
    spec = get_method("dapo").spec({"soft_overlong": False, "max_sampling_rounds": 8, "sampling_filter": "reward"})
    t, train = _trainer(tiny_model_dir, tmp_path, spec, _even_informative)
    batch = [{"prompt": train[i].prompt, "idx": i} for i in (1, 3) for _ in range(4)]  # both degenerate
    out = t._generate_and_score_completions(batch)
    assert out["completion_ids"].size(0) == 8                      # exactly the configured rows
    assert out["num_items_in_batch"].item() == out["completion_mask"].sum().item()
    m = t._metrics["train"]
    assert m["sampling/rounds"][-1] >= 2 and m["trained/groups/zero_variance"][-1] == 0.0
    assert m["groups/zero_variance"][-1] > 0                       # degenerate groups were generated (and dropped)
    prompts = {e.prompt: i for i, e in enumerate(train)}
    kept_idx = {prompts[r["prompt"]] for r in t.last_rollout}
    assert all(i % 2 == 0 for i in kept_idx)
    assert out["advantages"].abs().sum() > 0 and out["advantages"].shape == (8,)


def test_cap_policy_fail_raises_and_fill_warns(tiny_model_dir, tmp_path):
    constant = lambda prompts, completions, **kw: [1.0] * len(prompts)  # noqa: E731
    batch_rows = lambda train: [{"prompt": train[i].prompt, "idx": i} for i in (0, 1) for _ in range(4)]  # noqa: E731
    spec = get_method("dapo").spec({"soft_overlong": False, "max_sampling_rounds": 2, "sampling_cap_policy": "fail",
                                    "sampling_filter": "reward"})
    t, train = _trainer(tiny_model_dir, tmp_path / "a", spec, constant)
    with pytest.raises(SamplingCapError):
        t._generate_and_score_completions(batch_rows(train))
    spec = get_method("dapo").spec({"soft_overlong": False, "max_sampling_rounds": 2, "sampling_filter": "reward"})
    t, train = _trainer(tiny_model_dir, tmp_path / "b", spec, constant)
    with pytest.warns(UserWarning, match="2 of 2 groups are zero-variance fill-ins"):
        out = t._generate_and_score_completions(batch_rows(train))
    assert out["completion_ids"].size(0) == 8 and t._metrics["train"]["sampling/filled_groups"][-1] == 2.0
    assert t._metrics["train"]["sampling/rounds"][-1] == 2.0


def test_zero_variance_filter_recomputes_normaliser_by_hand(tiny_model_dir, tmp_path):
    spec = build_spec({"sampling": "zero_variance_filter", "aggregation": "token_mean", "sampling_filter": "reward"})
    t, _ = _trainer(tiny_model_dir, tmp_path, spec, _even_informative)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    out = {"completion_ids": torch.ones(4, 3, dtype=torch.long), "completion_mask": mask.clone()}
    t.num_generations = 2
    rows = [RolloutRow(correct=False, length=1, truncated=False, prompt="p", completion="c")] * 4
    t.group_sampling.filter_zero_variance(out, torch.tensor([[1.0], [0.0], [1.0], [1.0]]), rows)  # group 1 is zero-variance
    assert out["completion_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [0, 0, 0], [0, 0, 0]]
    assert out["num_items_in_batch"].item() == 5                    # 3 + 2 tokens of the kept group
    # token_mean loss with that normaliser: sum over kept tokens / 5
    from grpolab.algorithms import LossInputs, policy_loss
    logp = torch.full((4, 3), -1.0)
    loss, _ = policy_loss(build_spec({"surrogate": "reinforce", "aggregation": "token_mean"}), LossInputs(logp, logp,
                          torch.tensor([1.0, -1.0, 0.0, 0.0]), out["completion_mask"], token_normaliser=5))
    assert loss.item() == pytest.approx((3 * 1.0 - 2 * 1.0) / 5)


def _two_processes(tiny_model_dir, tmp_path, method, port):
    out = tmp_path / "decisions"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}   # PYTHONPATH: conftest's (this checkout, then the caller's)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(port), str(REPO / "tests/scripts/two_process_dynamic.py"),
                           str(tiny_model_dir), str(out), method], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / f"decisions.rank{r}.json").read_text()) for r in (0, 1)]


def test_reinforce_pp_whitens_over_both_processes(tiny_model_dir, tmp_path):
    ranks = _two_processes(tiny_model_dir, tmp_path, "reinforce_pp", 29518)
    assert ranks[0]["world"] == 2
    for a, b in zip(ranks[0]["token_stats"], ranks[1]["token_stats"]):
        total, total_sq, n = (x + y for x, y in zip(a, b))
        mean = total / n
        assert abs(mean) < 1e-4                                      # zero mean over the global batch
        assert math.sqrt((total_sq - n * mean * mean) / (n - 1)) == pytest.approx(1.0, abs=1e-3)
        assert abs(a[0] / a[2]) > 1e-3 or abs(b[0] / b[2]) > 1e-3      # not whitened per rank


def test_two_processes_make_identical_decisions_and_do_not_hang(tiny_model_dir, tmp_path):
    ranks = [r["sampling"] for r in _two_processes(tiny_model_dir, tmp_path, "dapo", 29517)]
    assert len(ranks[0]) == len(ranks[1]) == 2                      # two generation batches each
    for d0, d1 in zip(*ranks):
        assert d0["world"] == d1["world"] == 2
        assert d0["prompts"] == d1["prompts"]                       # identical global keep decisions
        assert d0["local_rows"] == d1["local_rows"] == 8            # same rows on every rank
        assert d0["num_items"] == d1["num_items"]                   # one global token normaliser
        assert d0["spread_min"] > 0                                 # no zero-variance group trained


def _opo_by_hand(t, out):
    """OPO's advantages from the rollout's generated lengths (rows), whatever the loss's mask."""
    from grpolab.algorithms import baselines, combine_rewards
    lengths = torch.tensor([float(r.length) for r in t._scored.rows])
    return baselines.opo(combine_rewards(t._scored.rewards, None), lengths, t.num_generations)


def test_opo_weighs_generated_lengths_when_the_zero_variance_filter_masks_a_group(tiny_model_dir, tmp_path):
    t, train = _trainer(tiny_model_dir, tmp_path, build_spec({"advantage": "opo", "sampling": "zero_variance_filter", "aggregation": "token_mean",
                                                               "sampling_filter": "reward"}), _even_informative)
    out = t._generate_and_score_completions([{"prompt": train[i].prompt, "idx": i} for i in (0, 1) for _ in range(4)])
    assert out["completion_mask"][4:].sum() == 0                  # the all-1 group is masked out of the loss
    assert torch.isfinite(out["advantages"]).all()
    assert out["advantages"][4:].tolist() == [0.0] * 4 and out["advantages"][:4].abs().sum() > 0
    torch.testing.assert_close(out["advantages"], _opo_by_hand(t, out))


def test_opo_counts_truncated_completions_in_full_under_the_overlong_filter(tiny_model_dir, tmp_path):
    t, train = _trainer(tiny_model_dir, tmp_path, build_spec({"advantage": "opo", "overlong_filter": True}),
                        _even_informative, mask_truncated_completions=True)
    out = t._generate_and_score_completions([{"prompt": train[i].prompt, "idx": i} for i in (0, 2) for _ in range(4)])
    truncated = [bool(r.truncated) for r in t._scored.rows]
    assert any(truncated) and out["completion_mask"][torch.tensor(truncated)].sum() == 0
    assert torch.isfinite(out["advantages"]).all()
    torch.testing.assert_close(out["advantages"], _opo_by_hand(t, out))


def test_gfpo_retains_the_shortest_or_most_efficient_and_gives_the_rest_no_advantage():
    """Hand-computed, two groups of 4, keep 2. By length: group 0 lengths 5, 2, 7, 2 -> rows 1, 3
    (tie on 2: both); group 1 lengths 3, 9, 1, 4 -> rows 4, 6. By reward / length: group 0
    r = 1, 0, 1, 1 -> 0.2, 0, 0.14, 0.5 -> rows 3, 0."""
    lengths = torch.tensor([5, 2, 7, 2, 3, 9, 1, 4])
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    by_length = sampling.gfpo_retained(lengths, rewards, 4, 2, "length")
    assert by_length.nonzero().view(-1).tolist() == [1, 3, 4, 6]
    efficient = sampling.gfpo_retained(lengths, rewards, 4, 2, "token_efficiency")
    assert efficient.nonzero().view(-1).tolist() == [0, 3, 5, 6]
    with pytest.raises(ValueError, match=r"gfpo_keep=4: must be in \[2, group_size\) = \[2, 4\)"):
        sampling.gfpo_retained(lengths, rewards, 4, 4, "length")
    # the trainer's filter: rejected rows leave the loss mask, the token count and the baseline
    out = {"completion_mask": (torch.arange(9).expand(8, 9) < lengths.view(-1, 1)).long()}
    spec = build_spec({"sampling": "gfpo", "gfpo_keep": 2, "advantage": "group_mean", "aggregation": "token_mean"})
    kept = sampling.gfpo_filter(out, rewards, spec, 4, 0, lambda t: t)
    assert out["completion_mask"].sum(1).tolist() == [0, 2, 0, 2, 3, 0, 1, 0]
    assert int(out["num_items_in_batch"]) == 8 and kept.kept_fraction == 0.5
    assert kept.length_gap == pytest.approx((5 + 7 + 9 + 4) / 4 - (2 + 2 + 3 + 1) / 4)
    from grpolab.algorithms import AdvantageInputs, compute_advantages
    A = compute_advantages(spec, AdvantageInputs(kept.rewards, 4)).advantages
    assert A.tolist() == pytest.approx([0, -0.5, 0, 0.5, -0.5, 0, 0.5, 0])   # group 0 retained r = 0, 1


def test_gfpo_ranks_a_truncated_completion_last_under_overlong_filter():
    """TRL's overlong filter zeroes a truncated row's mask before GFPO ranks: length 0 must not read as
    "the shortest". Group lengths 0 (truncated), 4, 2, 6, keep 2 -> rows 1, 2 (the two shortest that train);
    by reward / length the truncated row's r = 1 must not win either."""
    lengths = torch.tensor([0, 4, 2, 6])
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    assert sampling.gfpo_retained(lengths, rewards, 4, 2, "length").nonzero().view(-1).tolist() == [1, 2]
    assert sampling.gfpo_retained(lengths, rewards, 4, 2, "token_efficiency").nonzero().view(-1).tolist() == [1, 3]
    out = {"completion_mask": (torch.arange(7).expand(4, 7) < lengths.view(-1, 1)).long()}
    spec = build_spec({"sampling": "gfpo", "gfpo_keep": 2, "advantage": "group_mean", "aggregation": "token_mean",
                       "overlong_filter": True})
    kept = sampling.gfpo_filter(out, rewards, spec, 4, 0, lambda t: t)
    assert torch.isnan(kept.rewards[0]) and int(out["num_items_in_batch"]) == 6


def test_gfpo_refuses_keep_one_and_pairwise_dpo():
    from grpolab.errors import ConfigError
    base = {"sampling": "gfpo", "advantage": "group_mean", "aggregation": "token_mean"}
    with pytest.raises(ConfigError, match=r"method.gfpo_keep: must be >= 2 .* got 1"):
        build_spec({**base, "gfpo_keep": 1})
    with pytest.raises(ConfigError, match="sampling=gfpo with surrogate=group_dpo"):
        build_spec({**base, "surrogate": "group_dpo"})


def test_gfpo_settings_are_checked_before_any_work():
    from grpolab.errors import ConfigError
    with pytest.raises(ConfigError, match="sampling=gfpo drops completions from the token normaliser"):
        build_spec({"sampling": "gfpo"})
    with pytest.raises(ConfigError, match="sampling=gfpo leaves the rejected completions out of the baselines"):
        build_spec({"sampling": "gfpo", "aggregation": "token_mean", "advantage": "reinforce_pp"})
    with pytest.raises(ConfigError, match=r"method.gfpo_keep=8: .* < train.group_size \(4\)"):
        from grpolab.experiment.config import build_config
        build_config({"name": "x", "method": "gfpo", "task": {"name": "random_reward"}, "model": {"preset": "tiny"},
                      "train": {"group_size": 4}})


def test_gfpo_through_the_drop_in_needs_more_generations_than_it_keeps(tiny_model_dir, tmp_path):
    from trl import GRPOConfig

    from grpolab import GrpoLabTrainer
    _, _, ds = tiny_dataset()
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=4, num_generations=4,
                      use_cpu=True)
    with pytest.raises(ValueError, match=r"gfpo_keep=8 must be < GRPOConfig.num_generations \(4\)"):
        GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
                       args=args, train_dataset=ds, method="gfpo")


def test_gfpo_without_correctness_is_not_told_it_filters_on_accuracy():
    """GFPO never reads sampling_filter: the drop-in's no-correctness stand-in must leave it alone."""
    import warnings

    from grpolab.trainer.dropin import check_needs
    spec = build_spec({"sampling": "gfpo", "gfpo_keep": 2, "advantage": "group_mean", "aggregation": "token_mean"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = check_needs("gfpo", spec, has_correctness=False)
    assert checked.sampling_filter == "accuracy"
    assert not any("filters groups on accuracy" in str(w.message) for w in caught)
    dynamic = build_spec({"sampling": "dynamic"})
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert check_needs("dapo", dynamic, has_correctness=False).sampling_filter == "reward"


def test_group_filters_refuse_the_micro_batch_token_mean():
    """bnpo's token mean is per micro-batch: a micro-batch the filter empties still counts in the 1/GA
    division, so masking rows changes the step size; the filters need the global token count."""
    from grpolab.errors import ConfigError
    for sampling_value in ("zero_variance_filter", "gfpo"):
        with pytest.raises(ConfigError, match=f"sampling={sampling_value} drops completions from the token normaliser: "
                                              "use aggregation token_mean$"):
            build_spec({"sampling": sampling_value, "gfpo_keep": 2, "advantage": "group_mean",
                        "aggregation": "token_mean_local"})
