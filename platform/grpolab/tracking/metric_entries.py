"""The rollout curves (over what is generated, and ``trained/`` over what the update uses), the
held-out and benchmark scores, and the run's own (loss, learning rate, wall time): one record each.
Loss-side, method-specific and multi-turn curves are in ``metric_entries_loss``."""

from __future__ import annotations

from grpolab.tracking.metric_record import (ANY, BENCHMARK, GENERATED, HELD_OUT, MACHINE, NON_NEGATIVE, REQUIRED, RUN,
                                          TRAINED, UNIT, Metric)

ROLLOUT_AND_RUN = (
    Metric("reward/mean", GENERATED, "scorable completion", ANY,
           "mean total reward (all components, weighted, shaping included; the nansum of the rewards given) over "
           "the scorable completions (one every reward function returned None for is left out, as from TRL's "
           "`reward`)",
           trl="reward", when=REQUIRED, label="Reward (rollout mean)"),
    Metric("reward/std", GENERATED, "scorable completion", NON_NEGATIVE,
           "std (N-1) of the total reward over the scorable completions",
           trl="reward_std"),
    Metric("accuracy", GENERATED, "completion", UNIT,
           "fraction of completions the task verifier marks correct (independent of reward shaping)",
           when=REQUIRED),
    Metric("entropy", GENERATED, "token", NON_NEGATIVE,
           "mean per-token entropy (nats) of the sampling policy (pi_old) over every generated completion token: "
           "each completion's returned tokens (EOS included, padding not; multi-turn episodes: the model's own), "
           "truncated completions included; from the loss's forward when it sees exactly these under pi_old, else"
           " one no-grad forward per generation round",
           when=REQUIRED, label="Policy entropy"),
    Metric("length/mean", GENERATED, "completion", NON_NEGATIVE,
           "mean completion length in tokens, EOS included",
           trl="completions/mean_length", when=REQUIRED),
    Metric("length/correct", GENERATED, "correct completion", NON_NEGATIVE,
           "mean length of correct completions (absent at a step with none)",
           when=REQUIRED, label="Length of correct completions"),
    Metric("length/incorrect", GENERATED, "incorrect completion", NON_NEGATIVE,
           "mean length of incorrect completions (absent at a step with none)",
           when=REQUIRED, label="Length of incorrect completions"),
    Metric("length/std", GENERATED, "completion", NON_NEGATIVE,
           "std (N-1) of completion lengths in tokens, EOS included, over the generation batch: the spread that "
           "token-level aggregation (token_mean) weighs differently from sequence-level (seq_mean_token_mean); 0 "
           "when every completion has the same length",
           when=REQUIRED),
    Metric("length/cv", GENERATED, "completion", NON_NEGATIVE,
           "length/std / length/mean, the spread of completion lengths relative to their mean: scale-free, so one"
           " floor serves 24-token and 20k-token completions; 0 when all lengths agree"),
    Metric("length/truncated_fraction", GENERATED, "completion", UNIT,
           "fraction of completions that hit the length cap without EOS",
           trl="completions/clipped_ratio", when=REQUIRED),
    Metric("length/soft_penalized_fraction", GENERATED, "completion", UNIT,
           "fraction of completions in soft overlong punishment's zone, |o| > L_max - L_cache (DAPO eq. 13 gives "
           "them a penalty < 0; truncated completions included), with L_max the training cap and L_cache "
           "method.overlong_buffer or 20 % of the cap; computed for every method, punishing or not, so it means "
           "the same on every rung",
           when=REQUIRED),
    Metric("length/truncated_salvageable", HELD_OUT, "truncated held-out sample", UNIT,
           "of the sampled held-out completions that reached the cap (an EOS exactly"
           " at the cap counts), the fraction that ends correct when sampling continues from the prompt and that "
           "prefix for another cap of tokens (twice the cap): whether truncation is noise (the premise gate "
           "salvage_rate); logged at each evaluation that truncated something",
           when="eval.salvage, at an evaluation that truncated"),
    Metric("length/soft_penalized_correct_fraction", GENERATED, "correct completion", UNIT,
           "fraction of the CORRECT completions in soft overlong punishment's zone (the zone of "
           "`length/soft_penalized_fraction`; NaN at a step with none correct): how many right answers the "
           "punishment reaches, the premise gate correct_in_soft_zone"),
    Metric("groups/zero_variance", GENERATED, "group", UNIT,
           "fraction of groups whose total rewards all agree within 1e-6 (no policy gradient)",
           trl="frac_reward_zero_std", when=REQUIRED),
    Metric("groups/all_correct", GENERATED, "group", UNIT,
           "fraction of groups whose completions are all correct (verifier)",
           when=REQUIRED, label="All-correct groups (zero variance)"),
    Metric("groups/all_wrong", GENERATED, "group", UNIT,
           "fraction of groups whose completions are all incorrect (verifier)",
           when=REQUIRED, label="All-wrong groups (zero variance)"),
    Metric("tokens/generated", GENERATED, "sum over completions", NON_NEGATIVE,
           "completion tokens generated for this generation batch (every round, discarded ones included)"),
    Metric("tokens/cumulative", GENERATED, "sum over completions", NON_NEGATIVE,
           "completion tokens generated since the run started",
           when=REQUIRED),
    Metric("trained/reward/mean", TRAINED, "scorable trained row", ANY,
           "mean total reward of the scorable rows with a non-empty loss mask",
           when="a batch with a trained row"),
    Metric("trained/accuracy", TRAINED, "trained row", UNIT,
           "fraction correct among rows with a non-empty loss mask",
           when="a batch with a trained row"),
    Metric("trained/length/mean", TRAINED, "trained row", NON_NEGATIVE,
           "mean length of rows with a non-empty loss mask",
           when="a batch with a trained row"),
    Metric("trained/length/correct", TRAINED, "correct trained row", NON_NEGATIVE,
           "mean length of correct rows with a non-empty loss mask (absent at a step with none)",
           when="a batch with a trained row"),
    Metric("trained/length/incorrect", TRAINED, "incorrect trained row", NON_NEGATIVE,
           "mean length of incorrect rows with a non-empty loss mask (absent at a step with none)",
           when="a batch with a trained row"),
    Metric("trained/groups/zero_variance", TRAINED, "group", UNIT,
           "fraction of the update batch's groups with equal total rewards over their rows in the baseline "
           "(sampling=gfpo: the retained rows only)"),
    Metric("trained/groups/all_correct", TRAINED, "group", UNIT,
           "fraction of the update batch's groups whose rows in the baseline are all correct (sampling=gfpo: the "
           "retained rows only)"),
    Metric("trained/groups/all_wrong", TRAINED, "group", UNIT,
           "fraction of the update batch's groups whose rows in the baseline are all incorrect (sampling=gfpo: "
           "the retained rows only)"),
    Metric("above_group_mean/fraction", GENERATED, "completion", UNIT,
           "fraction of completions whose total reward is above "
           "their group's mean (stands in for `accuracy`)",
           when="drop-in trainer without correctness="),
    Metric("length/above_group_mean", GENERATED, "completion above its group's mean", NON_NEGATIVE,
           "mean length of completions whose reward is above their group's mean "
           "(stands in for `length/correct`; absent at a step with none)",
           when="drop-in trainer without correctness="),
    Metric("length/not_above_group_mean", GENERATED, "completion not above its group's mean", NON_NEGATIVE,
           "mean length of the other completions (stands in for "
           "`length/incorrect`; absent at a step with none)",
           when="drop-in trainer without correctness="),
    Metric("trained/above_group_mean/fraction", TRAINED, "trained row", UNIT,
           "as `above_group_mean/fraction`, over rows with a non-empty loss mask",
           when="drop-in trainer without correctness="),
    Metric("trained/length/above_group_mean", TRAINED, "trained row above its group's mean", NON_NEGATIVE,
           "as `length/above_group_mean`, over rows with a non-empty loss mask",
           when="drop-in trainer without correctness="),
    Metric("trained/length/not_above_group_mean", TRAINED, "trained row not above its group's mean", NON_NEGATIVE,
           "as `length/not_above_group_mean`, over rows with a non-empty loss mask",
           when="drop-in trainer without correctness="),
    Metric("trained/rows_fraction", TRAINED, "row", UNIT,
           "fraction of the update batch's rows with a non-empty loss mask (overlong filtering and the "
           "zero-variance filter empty rows)"),
    Metric("rewards/<reward function>/mean", GENERATED, "completion", ANY,
           "mean of one reward function's output over every generated completion (TRL's report, gathered over "
           "processes, averaged over dynamic-sampling rounds); the functions are the task's components and "
           "`overlong`",
           trl="rewards/<reward function>/mean"),
    Metric("rewards/<reward function>/std", GENERATED, "completion", NON_NEGATIVE,
           "std of one reward function's output (TRL's report, as above)",
           trl="rewards/<reward function>/std"),
    Metric("rewards/<reward function>/failure_rate", GENERATED, "completion", UNIT,
           "fraction of the rollout's completions on which a task reward (grpolab.tasks) raised, timed out or "
           "returned a non-number, scored its on_error value instead (averaged over processes)",
           when="task rewards (grpolab.tasks)"),
    Metric("loss", RUN, "optimizer step", ANY,
           "the optimised loss of the optimizer step (TRL's report, averaged over processes)",
           trl="loss", when="every optimizer step"),
    Metric("grad_norm", RUN, "optimizer step", NON_NEGATIVE,
           "gradient norm before clipping at the optimizer step (TRL's report)",
           trl="grad_norm", when="every optimizer step"),
    Metric("policy/param_change", RUN, "trainable parameter", NON_NEGATIVE,
           "||theta_t - theta_0||_2 / ||theta_0||_2 over the trainable parameters (a LoRA run: its adapter's), "
           "theta_0 as they were before the first step: how far training has moved the policy; exactly 0 only "
           "when no update changed a parameter, so \"nothing is learned\" is checked on it (a held-out score "
           "can sit at its floor while the policy moves); not taken where the parameters are sharded (FSDP, "
           "ZeRO-3) nor with eval.param_change false (theta_0 is kept in host memory): tag grpolab.param_change",
           when="eval.param_change (on by default), at each held-out evaluation, step 0 included"),
    Metric("learning_rate", RUN, "optimizer step", NON_NEGATIVE,
           "learning rate at the optimizer step",
           trl="learning_rate", when="every optimizer step"),
    Metric("step_time", RUN, "optimizer step", NON_NEGATIVE,
           "seconds per optimizer step (generation included)",
           trl="step_time", when=REQUIRED),
    Metric("time/generation_s", RUN, "generation batch", NON_NEGATIVE,
           "seconds this generation batch spent generating (TRL's _generate: sampling and decoding, every "
           "dynamic-sampling round; rank 0's clock)",
           when=REQUIRED),
    Metric("time/scoring_s", RUN, "generation batch", NON_NEGATIVE,
           "seconds this generation batch spent scoring (TRL's _calculate_rewards: the reward functions, ReMax's "
           "greedy scoring too)",
           when=REQUIRED),
    Metric("time/update_s", RUN, "generation batch", NON_NEGATIVE,
           "seconds of the generation batch's training steps outside generation and scoring (log-probs, "
           "advantages, forward, backward, optimizer; on a GPU synchronised once at the batch's end)",
           when=REQUIRED),
    Metric("time/generated_tokens_per_s", RUN, "generation batch", NON_NEGATIVE,
           "tokens/generated (every process) / time/generation_s",
           when=REQUIRED),
    Metric("time/accelerator_hours", RUN, "cumulative", NON_NEGATIVE,
           "processes x wall seconds since training started / 3600, cumulative (held-out evaluations and "
           "checkpoints between batches included; CPU-process hours on a CPU machine); the run's total is the tag"
           " grpolab.accelerator_hours",
           when=REQUIRED),
    Metric("override/advantage", GENERATED, "generation batch", UNIT,
           "1 when the platform's advantage estimator replaced TRL's for this rollout",
           when=REQUIRED),
    Metric("override/loss", TRAINED, "micro-batch (TRL's log)", UNIT,
           "1 when the platform's policy loss ran for this micro-batch",
           when=REQUIRED),
    Metric("eval/pass_at_1", HELD_OUT, "sample", UNIT,
           "mean correctness over k samples per prompt at the training temperature and cap",
           when=REQUIRED, label="Held-out pass@1"),
    Metric("eval/pass_at_1_curve_prompts", HELD_OUT, "sample", UNIT,
           "the final evaluation's pass@1 on the curve's prompts only: mean correctness over its eval.final_k "
           "samples per prompt of the first eval.prompts prompts of its eval.final_prompts (the prompts every "
           "earlier evaluation scores), at the final step only, where eval.final_prompts exceeds eval.prompts (else "
           "eval/pass_at_1 is it); what the equal-generated-tokens comparison of a "
           "ladder rung reads",
           when="the final evaluation"),
    Metric("eval/pass_at_k", HELD_OUT, "prompt", UNIT,
           "fraction of prompts with at least one correct sample among k",
           when=REQUIRED),
    Metric("eval/greedy_accuracy", HELD_OUT, "prompt", UNIT,
           "fraction of prompts whose greedy completion is correct",
           when=REQUIRED),
    Metric("eval/mean_length", HELD_OUT, "sample", NON_NEGATIVE,
           "mean sampled completion length in tokens",
           when="every evaluation"),
    Metric("eval/<benchmark>/avg_at_<n>", BENCHMARK, "sample", UNIT,
           "mean correctness over its n samples per prompt at its own decoding"
           " (avg@n; DAPO's avg@32)",
           when="eval.benchmarks"),
    Metric("eval/<benchmark>/pass_at_<k>", BENCHMARK, "prompt", UNIT,
           "unbiased pass@k = 1 - C(n-c, k) / C(n, k) per prompt (Chen et al. 2021), mean over "
           "prompts; k = 1, 2, 4, ... <= n, and n",
           when="eval.benchmarks"),
    Metric("eval/<benchmark>/maj_at_<n>", BENCHMARK, "prompt", UNIT,
           "fraction of prompts whose majority extracted answer over the n samples is correct; "
           "answers vote by the task grader's equivalence (1/2 = 0.5 = \\frac{1}{2} under a math grader), a tie "
           "goes to the answer seen first, no answer is wrong; not reported without an answer extractor",
           when="eval.benchmarks"),
    Metric("eval/<benchmark>/sd_at_<n>", BENCHMARK, "sample index", NON_NEGATIVE,
           "sample standard deviation over the n sample indices of each index's accuracy over "
           "the prompts: the spread of single-sample accuracy across the n samples, NOT the standard error of "
           "avg@n (that is sqrt(sum_p (c_p/n - avg@n)^2 / (P (P - 1))) over the P prompts, c_p correct of prompt "
           "p)",
           when="eval.benchmarks"),
    Metric("eval/<benchmark>/mean_length", BENCHMARK, "sample", NON_NEGATIVE,
           "mean sampled completion length in tokens",
           when="eval.benchmarks"),
    Metric("system/<system metric>", MACHINE, "sample", ANY,
           "only with tracking.system_metrics: MLflow's system metrics of the whole machine (CPU, memory, disk, "
           "network, GPU; not this run's share), one sample every $MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL s "
           "(default 10); the x-axis is the sample index, not the optimizer step",
           when="tracking.system_metrics"),
)
