"""Every rollout curve the platform tracks, computed in one place. docs/metrics.md defines them.

Rollout metrics are computed once per generation batch over the whole (all-process) batch;
loss metrics come from ``algorithms.policy_loss`` per micro-batch and are averaged over each
logging window by TRL's ``log``.
"""

from __future__ import annotations

import torch

ZERO_VARIANCE_TOL = 1e-6   # a group is zero-variance when max(r) - min(r) <= this


def rollout_metrics(rewards: torch.Tensor, correct: torch.Tensor, lengths: torch.Tensor,
                    truncated: torch.Tensor, group_size: int) -> dict[str, float]:
    """rewards (N,) total reward; correct (N,) bool; lengths (N,) completion tokens incl. EOS;
    truncated (N,) bool (hit the length cap without EOS). Groups are contiguous blocks of G."""
    correct = correct.bool()
    lengths = lengths.float()
    g_r = rewards.view(-1, group_size)
    g_c = correct.view(-1, group_size)
    zero_var = (g_r.max(1).values - g_r.min(1).values) <= ZERO_VARIANCE_TOL  # = not sampling.group_spread > tol
    out = {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
        "accuracy": correct.float().mean().item(),
        "length/mean": lengths.mean().item(),
        "length/correct": lengths[correct].mean().item() if correct.any() else float("nan"),
        "length/incorrect": lengths[~correct].mean().item() if (~correct).any() else float("nan"),
        "length/truncated_fraction": truncated.float().mean().item(),
        "groups/zero_variance": zero_var.float().mean().item(),
        "groups/all_correct": (zero_var & g_c.all(1)).float().mean().item(),
        "groups/all_wrong": (zero_var & ~g_c.any(1)).float().mean().item(),
        "tokens/generated": lengths.sum().item(),
    }
    return out


# name -> definition; rendered into docs/metrics.md by `grpolab metrics-doc` and checked by tests.
DEFINITIONS: dict[str, str] = {
    "reward/mean": "mean total reward (all components, weighted, shaping included) over the rollout batch",
    "reward/std": "std (N-1) of the total reward over the rollout batch",
    "accuracy": "fraction of rollout completions the task verifier marks correct (independent of reward shaping)",
    "length/mean": "mean completion length in tokens, EOS included",
    "length/correct": "mean length of correct completions (NaN when none)",
    "length/incorrect": "mean length of incorrect completions (NaN when none)",
    "length/truncated_fraction": "fraction of completions that hit max_completion_length without EOS",
    "groups/zero_variance": "fraction of groups whose rewards all agree within 1e-6 (no policy gradient)",
    "groups/all_correct": "fraction of groups that are zero-variance and all correct",
    "groups/all_wrong": "fraction of groups that are zero-variance and all incorrect",
    "tokens/generated": "completion tokens generated for this rollout batch",
    "tokens/cumulative": "completion tokens generated since the run started",
    "entropy": "mean per-token policy entropy over valid completion tokens (nats)",
    "clip/low_fraction": "fraction of valid tokens with ratio < 1 - eps_low and A < 0 (lower clip binds)",
    "clip/high_fraction": "fraction of valid tokens with ratio > 1 + eps_high and A > 0 (upper clip binds)",
    "clip/region_fraction": "fraction of valid tokens where either clip binds",
    "clip/high_old_prob": "mean old-policy probability of tokens clipped at the upper bound (NaN when none)",
    "kl": "mean per-token KL estimate to the reference (method's estimator), when a reference exists",
    "kl_reward_penalty": "mean per-sequence beta * sum_t KL_t(pi_old || pi_ref) subtracted from the reward (kl_placement=reward)",
    "cov/selected_fraction": "Clip-Cov / KL-Cov: fraction of valid tokens selected by covariance",
    "dpo/pairs": "Group-DPO: (best, worst) pairs formed in the micro-batch (groups with unequal rewards)",
    "tracker/prompts": "SPO: prompts the value tracker has seen",
    "entropy/kept_fraction": "top-entropy tokens: fraction of valid tokens kept in the loss",
    "entropy_coef": "adaptive entropy bonus: the coefficient after this optimizer step",
    "sampling/rounds": "dynamic sampling: generation rounds used to fill this batch",
    "sampling/kept_fraction": "dynamic sampling: trained groups / generated groups; filter mode: informative groups / groups",
    "sampling/filled_groups": "dynamic sampling: zero-variance groups used as fill-ins at the round cap",
    "sampling/all_correct_before": "dynamic sampling: all-correct zero-variance fraction of generated groups, before filtering",
    "sampling/all_wrong_before": "dynamic sampling: all-wrong zero-variance fraction of generated groups, before filtering",
    "sampling/discarded_tokens": "dynamic sampling: completion tokens generated but dropped (included in tokens/*)",
    "loss": "the optimised loss as reported by the trainer",
    "step_time": "seconds per optimizer step (generation included)",
    "override/advantage": "1 when the platform's advantage estimator replaced TRL's for this rollout",
    "override/loss": "1 when the platform's policy loss ran for this micro-batch",
    "eval/pass@1": "held-out: mean correctness over k samples per prompt at the training temperature",
    "eval/pass@k": "held-out: fraction of prompts with at least one correct sample among k",
    "eval/greedy_accuracy": "held-out: fraction of prompts whose greedy completion is correct",
    "eval/mean_length": "held-out: mean sampled completion length in tokens",
}

# Keys every tracked training run must hold (tests read them back from MLflow).
REQUIRED_RUN_METRICS = (
    "reward/mean", "accuracy", "entropy", "length/mean", "length/correct", "length/incorrect",
    "length/truncated_fraction", "clip/low_fraction", "clip/high_fraction", "clip/region_fraction",
    "groups/zero_variance", "groups/all_correct", "groups/all_wrong", "tokens/cumulative", "step_time",
    "override/advantage", "override/loss", "eval/pass@1", "eval/pass@k", "eval/greedy_accuracy",
)


def render_doc() -> str:
    lines = ["# Metrics", "", "Every curve grpolab logs to MLflow, with its exact meaning. Generated from",
             "`grpolab.metrics.DEFINITIONS` (`grpolab metrics-doc`).", "",
             "Clip curves are non-zero only when rollouts are reused (`train.minibatches > 1` or",
             "`train.num_iterations > 1`): with one optimizer step per rollout the ratio is exactly 1.",
             "Experiments that compare clipping must be configured that way.", "",
             "| metric | definition |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in DEFINITIONS.items()]
    return "\n".join(lines) + "\n"
