"""Every rollout curve the platform tracks, computed in one place. docs/metrics.md defines them.

Rollout metrics are computed once per generation batch over the whole (all-process) batch;
loss metrics come from ``algorithms.policy_loss`` per micro-batch and are averaged over each
logging window by TRL's ``log``.
"""

from __future__ import annotations

import torch

ZERO_VARIANCE_TOL = 1e-6   # a group is zero-variance when max(r) - min(r) <= this


def group_spread(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """max - min reward per group over its scorable rows (NaN: every reward function returned
    None), shape (N / G,); 0 for a group with none."""
    g = rewards.view(-1, group_size).float()
    valid = ~torch.isnan(g)
    high = torch.where(valid, g, float("-inf")).max(1).values
    low = torch.where(valid, g, float("inf")).min(1).values
    return torch.where(valid.any(1), high - low, torch.zeros_like(high))


def soft_penalized_fraction(lengths: torch.Tensor, max_length: int, buffer: int) -> float:
    """Fraction of completions in soft overlong punishment's zone, where DAPO eq. 13 gives a
    penalty < 0: |o| > L_max - L_cache, with L_cache = ``buffer`` (0: 20 % of the cap, as the
    punishment itself, ``algorithms.overlong_buffer``). Truncated completions (|o| = L_max) are
    in it. Computed the same whether or not the method punishes, so it means the same on every
    rung: how many completions the punishment reaches (or would reach)."""
    start = max_length - overlong_buffer(max_length, buffer)
    return (lengths.float() > start).float().mean().item() if lengths.numel() else float("nan")


def rollout_metrics(rewards: torch.Tensor, correct: torch.Tensor, lengths: torch.Tensor,
                    truncated: torch.Tensor, group_size: int, overlong: tuple[int, int] | None = None
                    ) -> dict[str, float]:
    """Curves of one population of completions (groups contiguous blocks of G).

    rewards (N,) total reward; correct (N,) bool from the task verifier; lengths (N,) completion
    tokens incl. EOS; truncated (N,) bool (hit the length cap without EOS); overlong (L_max,
    configured L_cache or 0) adds ``length/soft_penalized_fraction`` and, over the correct
    completions only, ``length/soft_penalized_correct_fraction``. ``length/std`` is the
    spread of lengths (std, N-1) that token-level aggregation weighs differently from sequence-
    level: sum_i sum_t / sum_i |o_i| vs mean_i (1/|o_i|) sum_t. ``groups/zero_variance``
    is about the reward (no policy gradient); ``groups/all_correct`` and ``groups/all_wrong`` are
    about correctness only, whatever the reward shaping adds. ``reward/mean`` and ``reward/std``
    average the scorable completions only (a NaN total: every reward function returned None;
    TRL's ``reward`` curve leaves them out the same way); every other curve counts them all."""
    correct = correct.bool()
    lengths = lengths.float()
    g_c = correct.view(-1, group_size)
    zero_var = group_spread(rewards, group_size) <= ZERO_VARIANCE_TOL  # = not sampling.group_spread > tol
    scored = rewards[~torch.isnan(rewards)]
    out = {
        "reward/mean": scored.mean().item() if scored.numel() else float("nan"),
        "reward/std": scored.std().item() if scored.numel() > 1 else 0.0,
        "accuracy": correct.float().mean().item(),
        "length/mean": lengths.mean().item(),
        "length/correct": lengths[correct].mean().item() if correct.any() else float("nan"),
        "length/incorrect": lengths[~correct].mean().item() if (~correct).any() else float("nan"),
        "length/std": lengths.std().item() if lengths.numel() > 1 else 0.0,
        "length/cv": (lengths.std() / lengths.mean()).item() if lengths.numel() > 1 and lengths.mean() > 0 else 0.0,
        "length/truncated_fraction": truncated.float().mean().item(),
        "groups/zero_variance": zero_var.float().mean().item(),
        "groups/all_correct": g_c.all(1).float().mean().item(),
        "groups/all_wrong": (~g_c.any(1)).float().mean().item(),
        "tokens/generated": lengths.sum().item(),
    }
    if overlong is not None:
        out["length/soft_penalized_fraction"] = soft_penalized_fraction(lengths, *overlong)
        # the premise of soft punishment: it shapes an over-long tail, not the correct answers
        out["length/soft_penalized_correct_fraction"] = soft_penalized_fraction(lengths[correct], *overlong)
    return out


def trained_metrics(rewards: torch.Tensor, correct: torch.Tensor, lengths: torch.Tensor, trained: torch.Tensor,
                    group_size: int, retained: torch.Tensor | None = None) -> dict[str, float]:
    """The same curves over the trained population: the groups the sampling axis kept (all rows
    of the update batch), and, for per-row curves, only rows whose loss mask is not empty
    (``trained``; overlong filtering empties truncated rows). Prefixed ``trained/``. The group
    curves read each group's ``retained`` rows (default all; GFPO rejects the rest, which enter no
    baseline): a group whose retained rewards agree trains with A = 0 whatever its rejected rows got."""
    trained, correct, lengths = trained.bool(), correct.bool(), lengths.float()
    retained = torch.ones_like(correct) if retained is None else retained.bool()
    in_group = rewards.float().masked_fill(~retained, float("nan"))
    kept_correct, kept_wrong = (correct & retained).view(-1, group_size), (~correct & retained).view(-1, group_size)
    out = {"trained/groups/zero_variance": (group_spread(in_group, group_size) <= ZERO_VARIANCE_TOL).float().mean().item(),
           "trained/groups/all_correct": (~kept_wrong.any(1)).float().mean().item(),
           "trained/groups/all_wrong": (~kept_correct.any(1)).float().mean().item()}
    if trained.any():
        rows = rollout_metrics(rewards[trained], correct[trained], lengths[trained], trained[trained], 1)
        for key in ("reward/mean", "accuracy", "length/mean", "length/correct", "length/incorrect"):
            out[f"trained/{key}"] = rows[key]
    out["trained/rows_fraction"] = trained.float().mean().item()
    return out


# name -> definition; rendered into docs/metrics.md by `grpolab metrics-doc` and checked by tests.
# Populations: unprefixed rollout curves are over EVERY completion generated for a generation batch
# (all dynamic-sampling rounds, before any filter), so their meaning does not change across rungs;
# ``trained/`` curves are over what the update uses. Loss-side curves are reduced over every
# micro-batch of a generation batch (fresh and reused passes) and every process, logged once per
# generation batch.
DEFINITIONS: dict[str, str] = {
    "reward/mean": "generated: mean total reward (all components, weighted, shaping included; the nansum of "
                   "the rewards given) over the scorable completions (one every reward function returned None "
                   "for is left out, as from TRL's `reward`)",
    "reward/std": "generated: std (N-1) of the total reward over the scorable completions",
    "accuracy": "generated: fraction of completions the task verifier marks correct (independent of reward shaping)",
    "entropy": "generated: mean per-token entropy (nats) of the sampling policy (pi_old) over every generated "
               "completion token: each completion's returned tokens (EOS included, padding not; multi-turn "
               "episodes: the model's own), truncated completions included; from the loss's forward when it "
               "sees exactly these under pi_old, else one no-grad forward per generation round",
    "length/mean": "generated: mean completion length in tokens, EOS included",
    "length/correct": "generated: mean length of correct completions (absent at a step with none)",
    "length/incorrect": "generated: mean length of incorrect completions (absent at a step with none)",
    "length/std": "generated: std (N-1) of completion lengths in tokens, EOS included, over the generation batch: "
                  "the spread that token-level aggregation (token_mean) weighs differently from sequence-level "
                  "(seq_mean_token_mean); 0 when every completion has the same length",
    "length/cv": "generated: length/std / length/mean, the spread of completion lengths relative to their mean: "
                 "scale-free, so one floor serves 24-token and 20k-token completions; 0 when all lengths agree",
    "length/truncated_fraction": "generated: fraction of completions that hit the length cap without EOS",
    "length/soft_penalized_fraction": "generated: fraction of completions in soft overlong punishment's zone, "
                                      "|o| > L_max - L_cache (DAPO eq. 13 gives them a penalty < 0; truncated "
                                      "completions included), with L_max the training cap and L_cache "
                                      "method.overlong_buffer or 20 % of the cap; computed for every method, "
                                      "punishing or not, so it means the same on every rung",
    "length/truncated_salvageable": "held-out, with eval.salvage: of the sampled held-out completions that "
                                    "reached the cap (an EOS exactly at the cap counts), the fraction that ends "
                                    "correct when sampling continues from the prompt and that prefix for another "
                                    "cap of tokens (twice the cap): whether truncation is noise (the premise gate "
                                    "salvage_rate); logged at each evaluation that truncated something",
    "length/soft_penalized_correct_fraction": "generated: fraction of the CORRECT completions in soft overlong "
                                              "punishment's zone (the zone of `length/soft_penalized_fraction`; NaN "
                                              "at a step with none correct): how many right answers the punishment "
                                              "reaches, the premise gate correct_in_soft_zone",
    "groups/zero_variance": "generated: fraction of groups whose total rewards all agree within 1e-6 (no policy gradient)",
    "groups/all_correct": "generated: fraction of groups whose completions are all correct (verifier)",
    "groups/all_wrong": "generated: fraction of groups whose completions are all incorrect (verifier)",
    "tokens/generated": "completion tokens generated for this generation batch (every round, discarded ones included)",
    "tokens/cumulative": "completion tokens generated since the run started",
    "trained/reward/mean": "trained: mean total reward of the scorable rows with a non-empty loss mask",
    "trained/accuracy": "trained: fraction correct among rows with a non-empty loss mask",
    "trained/length/mean": "trained: mean length of rows with a non-empty loss mask",
    "trained/length/correct": "trained: mean length of correct rows with a non-empty loss mask (absent at a step with none)",
    "trained/length/incorrect": "trained: mean length of incorrect rows with a non-empty loss mask (absent at a step with none)",
    "trained/groups/zero_variance": "trained: fraction of the update batch's groups with equal total rewards "
                                    "over their rows in the baseline (sampling=gfpo: the retained rows only)",
    "trained/groups/all_correct": "trained: fraction of the update batch's groups whose rows in the baseline are "
                                  "all correct (sampling=gfpo: the retained rows only)",
    "trained/groups/all_wrong": "trained: fraction of the update batch's groups whose rows in the baseline are "
                                "all incorrect (sampling=gfpo: the retained rows only)",
    "above_group_mean/fraction": "generated, drop-in trainer without correctness=: fraction of completions whose "
                                 "total reward is above their group's mean (stands in for `accuracy`)",
    "length/above_group_mean": "generated, without correctness=: mean length of completions whose reward is above "
                               "their group's mean (stands in for `length/correct`; absent at a step with none)",
    "length/not_above_group_mean": "generated, without correctness=: mean length of the other completions (stands "
                                   "in for `length/incorrect`; absent at a step with none)",
    "trained/above_group_mean/fraction": "trained, without correctness=: as `above_group_mean/fraction`, over rows "
                                         "with a non-empty loss mask",
    "trained/length/above_group_mean": "trained, without correctness=: as `length/above_group_mean`, over rows with "
                                       "a non-empty loss mask",
    "trained/length/not_above_group_mean": "trained, without correctness=: as `length/not_above_group_mean`, over "
                                           "rows with a non-empty loss mask",
    "trained/rows_fraction": "trained: fraction of the update batch's rows with a non-empty loss mask "
                             "(overlong filtering and the zero-variance filter empty rows)",
    "trained/entropy": "trained: mean per-token entropy of the current policy over trained tokens (loss mask), "
                       "over every pass of the generation batch",
    "clip/low_fraction": "trained: fraction of token updates a lower clip changed (PPO-family: ratio < 1 - eps_low "
                         "with A < 0; CISPO: IS weight truncated below, any A); over every pass of the generation batch",
    "clip/high_fraction": "trained: fraction of token updates an upper clip changed (PPO-family: ratio > 1 + eps_high "
                          "with A > 0; CISPO: IS weight truncated above, any A)",
    "clip/dual_fraction": "trained: dual-clip: fraction of token updates with A < 0 and ratio > c (loss capped)",
    "clip/region_fraction": "trained: fraction of token updates any clip changed (low, high or dual)",
    "clip/high_old_prob": "trained: mean old-policy probability of the upper-clipped tokens (absent when none)",
    "clip/low_old_prob_fraction": "trained: fraction of trained tokens whose old-policy probability is below 0.2 "
                                  "(surrogates that clip): whether the policy samples the low-probability tokens "
                                  "DAPO's Fig. 3a finds the upper clip acting on; the premise gate low_prob_token_share",
    "sapo/gate_mean": "trained: SAPO: mean soft-gate weight 4 s (1 - s), s = sigmoid(tau (ratio - 1)), on the "
                      "unclipped gradient (1 at ratio 1)",
    "sapo/gate_below_half": "trained: SAPO: fraction of token updates whose gate weight is below 0.5",
    "kl": "trained: mean per-token KL estimate to the reference (method's estimator), when a reference exists",
    "kl_reward_penalty": "generated batch: mean per-sequence beta * sum_t KL_t(pi_old || pi_ref) subtracted from the "
                         "reward (kl_placement=reward)",
    "cov/selected_fraction": "trained: Clip-Cov / KL-Cov: fraction of trained tokens selected by covariance",
    "dppo/masked_fraction": "trained: DPPO: fraction of trained tokens whose divergence from pi_old exceeds its bound "
                            "in the advantage's direction (their gradient is dropped; verl's pg_clipfrac)",
    "dppo/truncated_fraction": "trained: DPPO: fraction of trained tokens kept with a ratio above the IS cap "
                               "dual_clip_c (their weight truncated; verl's pg_clipfrac_lower)",
    "policy/old_kl": "trained: DPPO / DRO: mean over trained tokens of log pi_old - log pi (verl's actor/ppo_kl; 0 "
                     "on-policy)",
    "dpo/pairs": "trained: Group-DPO: (best, worst) pairs per micro-step over all processes (groups with unequal rewards)",
    "tracker/prompts": "SPO: prompts the value tracker has seen",
    "remax/greedy_reward_mean": "ReMax (advantage remax): mean total reward of the greedy completions, one per "
                                "prompt of the update batch, whose reward is each prompt's baseline",
    "otb/sum_pi_squared_mean": "optimal token baselines: mean of sum_v pi_old(v)^2 over every model token of the "
                               "update batch's completions on all processes, the tokens their baselines are over "
                               "(truncated completions and rows the zero-variance filter masks included; tool tokens "
                               "of episodes excluded; with dynamic sampling, only the rows assembled into the batch), "
                               "the vocabulary sum in their path-variance weights (1 where pi_old is one-hot)",
    "entropy/kept_fraction": "trained: top-entropy tokens: fraction of trained tokens that carry the policy gradient",
    "off_policy/kept_fraction": "trained: GRPOConfig.off_policy_mask_threshold (TRL's off-policy sequence mask): "
                                "fraction of trained tokens whose surrogate term the mask keeps",
    "entropy_coef": "entropy bonus: the coefficient after this optimizer step (adaptive, adaptive_gated: from the "
                    "step's trained/entropy over every process; static: constant, logged as TRL does)",
    "aux_loss": "trained: MoE models: the router's load-balancing auxiliary loss, added to the loss times TRL's "
                "router_aux_loss_coef (the model config's by default) as TRL 1.16 adds it; mean over micro-batches",
    "vespo/phi_seq_mean": "trained: VESPO: mean over completions of the gamma kernel weight phi(w) of the sequence "
                          "importance ratio (1 on-policy; TRL's name)",
    "critic/value_loss": "trained: critic (gae): mean 0.5 (V - R)^2 over trained tokens",
    "lm/positive_nll": "trained: VAPO positive-example LM loss, mean negative log-prob of the tokens of correct completions (micro-batches without a correct completion are left out)",
    "critic/warmup": "critic (gae): 1 while the policy is frozen for value pretraining",
    "sampling/rounds": "dynamic sampling: generation rounds used to fill this batch",
    "sampling/kept_fraction": "dynamic sampling: trained groups / generated groups; filter mode: informative groups / "
                              "groups; gfpo: retained completions / generated completions (gfpo_keep / group_size)",
    "gfpo/length_gap": "gfpo: mean length of the rejected completions minus that of the retained ones, in tokens "
                       "(> 0: the filter kept the shorter ones; by length always >= 0)",
    "sampling/filled_groups": "dynamic sampling: groups without variance used as fill-ins at the round cap",
    "sampling/discarded_tokens": "dynamic sampling: completion tokens generated but dropped (included in tokens/*)",
    "rewards/<reward function>/mean": "generated: mean of one reward function's output over every generated "
                                      "completion (TRL's report, gathered over processes, averaged over dynamic-"
                                      "sampling rounds); the functions are the task's components and `overlong`",
    "rewards/<reward function>/std": "generated: std of one reward function's output (TRL's report, as above)",
    "rewards/<reward function>/failure_rate": "generated: fraction of the rollout's completions on which a task "
                                              "reward (grpolab.tasks) raised, timed out or returned a non-number, "
                                              "scored its on_error value instead (averaged over processes)",
    "loss": "the optimised loss of the optimizer step (TRL's report, averaged over processes)",
    "grad_norm": "gradient norm before clipping at the optimizer step (TRL's report)",
    "learning_rate": "learning rate at the optimizer step",
    "step_time": "seconds per optimizer step (generation included)",
    "time/generation_s": "seconds this generation batch spent generating (TRL's _generate: sampling and decoding, "
                         "every dynamic-sampling round; rank 0's clock)",
    "time/scoring_s": "seconds this generation batch spent scoring (TRL's _calculate_rewards: the reward "
                      "functions, ReMax's greedy scoring too)",
    "time/update_s": "seconds of the generation batch's training steps outside generation and scoring (log-probs, "
                     "advantages, forward, backward, optimizer; on a GPU synchronised once at the batch's end)",
    "time/generated_tokens_per_s": "tokens/generated (every process) / time/generation_s",
    "time/accelerator_hours": "processes x wall seconds since training started / 3600, cumulative (held-out "
                              "evaluations and checkpoints between batches included; CPU-process hours on a "
                              "CPU machine); the run's total is the tag grpolab.accelerator_hours",
    "override/advantage": "1 when the platform's advantage estimator replaced TRL's for this rollout",
    "override/loss": "1 when the platform's policy loss ran for this micro-batch",
    "eval/pass_at_1": "held-out: mean correctness over k samples per prompt at the training temperature and cap",
    "eval/pass_at_k": "held-out: fraction of prompts with at least one correct sample among k",
    "eval/greedy_accuracy": "held-out: fraction of prompts whose greedy completion is correct",
    "eval/mean_length": "held-out: mean sampled completion length in tokens",
    "eval/<benchmark>/avg_at_<n>": "named benchmark (eval.benchmarks): mean correctness over its n samples per prompt at its own decoding (avg@n; DAPO's avg@32)",
    "eval/<benchmark>/pass_at_<k>": "named benchmark: unbiased pass@k = 1 - C(n-c, k) / C(n, k) per prompt (Chen et al. 2021), mean over prompts; k = 1, 2, 4, ... <= n, and n",
    "eval/<benchmark>/maj_at_<n>": "named benchmark: fraction of prompts whose majority extracted answer over the n samples is correct; answers vote by the task grader's equivalence (1/2 = 0.5 = \\frac{1}{2} under a math grader), a tie goes to the answer seen first, no answer is wrong; not reported without an answer extractor",
    "eval/<benchmark>/sd_at_<n>": "named benchmark: sample standard deviation over the n sample indices of each index's accuracy over the prompts: the spread of single-sample accuracy across the n samples, NOT the standard error of avg@n (that is sqrt(sum_p (c_p/n - avg@n)^2 / (P (P - 1))) over the P prompts, c_p correct of prompt p)",
    "eval/<benchmark>/mean_length": "named benchmark: mean sampled completion length in tokens",
    "system/<system metric>": "only with tracking.system_metrics: MLflow's system metrics of the whole machine (CPU, "
                              "memory, disk, network, GPU; not this run's share), one sample every "
                              "$MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL s (default 10); the x-axis is the sample "
                              "index, not the optimizer step",
}
# Prefixes of the curves that measure wall-clock time (``key.startswith(MEASURED_TIME)``): two runs of
# one configuration never log equal values, so a resumed run equals an undisturbed one in every curve
# except these (and MLflow's system/* samples).
MEASURED_TIME = ("step_time", "time/")

from grpolab.algorithms.shaping import overlong_buffer
from grpolab.envs.definitions import EPISODE_DEFINITIONS  # noqa: E402 - multi-turn tasks' curves (grpolab.envs)

DEFINITIONS.update(EPISODE_DEFINITIONS)

# Keys every tracked training run must hold (tests read them back from MLflow).
REQUIRED_RUN_METRICS = (
    "reward/mean", "accuracy", "entropy", "length/mean", "length/correct", "length/incorrect",
    "length/truncated_fraction", "length/std", "length/soft_penalized_fraction", "clip/low_fraction", "clip/high_fraction", "clip/region_fraction",
    "groups/zero_variance", "groups/all_correct", "groups/all_wrong", "tokens/cumulative", "step_time",
    "time/generation_s", "time/scoring_s", "time/update_s", "time/generated_tokens_per_s", "time/accelerator_hours",
    "override/advantage", "override/loss", "eval/pass_at_1", "eval/pass_at_k", "eval/greedy_accuracy",
)


def render_doc() -> str:
    lines = ["# Metrics", "", "Every curve grpolab logs to MLflow, with its exact meaning. Generated from",
             "`grpolab.trainer.metrics.DEFINITIONS` (`grpolab metrics-doc`).", "",
             "Populations. `generated:` curves are over every completion generated for a generation",
             "batch (all dynamic-sampling rounds, before any filter), so they mean the same on every rung;",
             "`trained:` curves (names starting `trained/`, and the loss-side `clip/*`, `kl`, ...) are over",
             "what the update uses: the kept groups, rows with a non-empty loss mask, their valid tokens.",
             "Rollout curves are logged once per generation batch; loss-side curves are reduced over every",
             "micro-batch of the generation batch (the fresh and the reused passes together, so they do not",
             "zigzag) and over every process, and logged at its last optimizer step.", "",
             "Clip curves are non-zero only when rollouts are reused (`train.minibatches > 1` or",
             "`train.num_iterations > 1`): with one optimizer step per rollout the ratio is exactly 1.",
             "Experiments that compare clipping must be configured that way (grpolab warns otherwise).", "",
             "Held-out keys are written as MLflow stores them (`eval/pass_at_1`); study metrics use the",
             "same names.", "",
             "A curve with no value at a step (`length/correct` when no completion was correct,",
             "`clip/high_old_prob` when no token was clipped) is left out of that step, never logged as",
             "NaN or None (TRL's `log` passes None, which MLflow refuses with a warning): in CLI runs and",
             "in `GrpoLabTrainer`'s own `report_to` logging alike.", "",
             "| metric | definition |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in DEFINITIONS.items()]
    return "\n".join(lines) + "\n"
