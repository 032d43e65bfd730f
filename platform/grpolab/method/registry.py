"""The registry: every named method is a cited combination of axis values (``spec.py``).

Adding a method built from existing axis values touches only this file; the contract suite in
tests/ runs every registered method. ``regime`` holds training-regime defaults a method needs to
mean anything (e.g. rollout reuse for methods whose point is off-policy correction); an
experiment may still override them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpolab.errors import ConfigError, NotImplementedMethodError, did_you_mean
from grpolab.method.spec import MethodSpec, build_spec


@dataclass(frozen=True)
class Method:
    key: str
    title: str
    citation: str
    axes: dict = field(default_factory=dict)
    regime: dict = field(default_factory=dict)
    note: str = ""
    missing: str = ""            # non-empty: not implemented yet, and why; requesting it raises

    def spec(self, overrides: dict | None = None) -> MethodSpec:
        if self.missing:
            raise NotImplementedMethodError(f"method {self.key!r} ({self.title}) is not implemented yet: {self.missing}")
        return build_spec({**self.axes, **(overrides or {})})


_NO_KL = {"kl_coef": 0.0}
_REUSE = {"minibatches": 2}
_GRPO_CLIP_TOKEN_MEAN = dict(ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2, aggregation="token_mean", **_NO_KL)   # two optimizer steps per rollout: the second one is off-policy

METHODS: dict[str, Method] = {m.key: m for m in [
    Method("grpo", "GRPO", "Shao et al. 2024, DeepSeekMath, arXiv:2402.03300",
           dict(advantage="group_std", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="seq_mean_token_mean", kl_coef=0.04, kl_estimator="k3", kl_placement="loss"),
           note="clip 0.2 is the PPO default; the paper gives no value"),
    Method("dr_grpo", "Dr. GRPO", "Liu et al. 2025, Understanding R1-Zero-Like Training, arXiv:2503.20783",
           dict(advantage="group_mean", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="seq_mean_token_sum_norm", **_NO_KL)),
    Method("dapo", "DAPO", "Yu et al. 2025, DAPO, arXiv:2503.14476",
           dict(advantage="group_std", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.28,
                aggregation="token_mean", overlong_filter=True, soft_overlong=True, sampling="dynamic", **_NO_KL)),
    Method("clip_dapo", "CLIP-DAPO", "S. Roy, GRPO Variants (survey); DAPO (Yu et al. 2025, arXiv:2503.14476) with PPO clipping kept",
           dict(advantage="group_std", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.28,
                aggregation="token_mean", overlong_filter=True, soft_overlong=True, sampling="dynamic", **_NO_KL),
           note="same update rule as dapo: the GRPO Variants survey says DAPO drops the clip, the DAPO paper keeps it"),
    Method("gspo", "GSPO", "Zheng et al. 2025, Group Sequence Policy Optimization, arXiv:2507.18071",
           dict(advantage="group_std", ratio="sequence", surrogate="clip", eps_low=3e-4, eps_high=4e-4,
                aggregation="seq_mean_token_mean", **_NO_KL), regime=_REUSE),
    Method("luspo", "LUSPO", "Liu, Yin, Shi, Yang, Zeng, Qiu 2026, Length-Unbiased Sequence Policy Optimization: "
                             "Revealing and Controlling Response Length Variation in RLVR, arXiv:2602.05261 (the LUSPO "
                             "objective of its method section; TRL 1.16 loss_type='luspo')",
           dict(advantage="group_std", ratio="sequence", surrogate="clip", eps_low=3e-4, eps_high=4e-4,
                aggregation="seq_mean_token_sum", **_NO_KL), regime=_REUSE,
           note="GSPO's sequence-ratio clip with each sequence's term scaled by its length |o_i| "
                "(aggregation seq_mean_token_sum, as TRL's luspo); clip 3e-4/4e-4 and two updates per rollout are "
                "GSPO's settings, which LUSPO modifies (the paper's own clip values were not checked here)"),
    Method("vespo", "VESPO", "Shen, Zhao, Cheng, Huang, Yu 2026, VESPO: Variational Sequence-Level Soft Policy "
                             "Optimization for Stable Off-Policy LLM Training, arXiv:2602.10693 (the gamma reshaping "
                             "kernel of its method section; TRL 1.16 loss_type='vespo')",
           dict(advantage="group_std", ratio="token", surrogate="vespo", vespo_k_pos=2.0, vespo_lambda_pos=3.0,
                vespo_k_neg=3.0, vespo_lambda_neg=2.0, aggregation="token_mean", **_NO_KL), regime=_REUSE,
           note="-sg(phi(w)) A log pi with w the sequence's whole importance ratio (no length normalisation) and "
                "phi(w) = w^k exp(lambda (1 - w)), (k, lambda) = (2, 3) for A >= 0 and (3, 2) for A < 0 (TRL's "
                "defaults); token-mean loss as TRL's vespo; two updates per rollout, since on-policy phi = 1"),
    Method("intellect2", "INTELLECT-2 two-sided clip", "Prime Intellect Team 2025, INTELLECT-2: A Reasoning Model "
                                                          "Trained Through Globally Decentralized Reinforcement "
                                                          "Learning, arXiv:2505.07291 (two-sided GRPO clipping; TRL "
                                                          "1.16 GRPOConfig.delta)",
           dict(advantage="group_std", ratio="token", surrogate="dual_clip", eps_low=0.2, eps_high=0.2, dual_clip_c=4.0,
                aggregation="token_mean", **_NO_KL), regime=_REUSE,
           note="PPO clip whose ratio is also capped at delta for A < 0, so a negative-advantage token's loss is "
                "bounded by -delta A (TRL: delta=4 with loss_type='dapo'). delta = 4 is the report's section 4.1 "
                "value as TRL's paper index (docs/source/paper_index.md) quotes it, not read in the report itself; "
                "TRL 1.16's GRPOConfig docstring gives no value. Rollout reuse stands in for INTELLECT-2's "
                "asynchrony (the source of its stale ratios): at delta = 4 clip/dual_fraction is expected to stay "
                "near 0 on the reuse regime's ratios; acts only off-policy (on-policy rho = 1 < delta)"),
    Method("top_entropy_80_20", "80/20 high-entropy tokens (DAPO)", "Wang et al. 2025, Beyond the 80/20 Rule: "
                                                                    "High-Entropy Minority Tokens Drive Effective "
                                                                    "Reinforcement Learning for LLM Reasoning, "
                                                                    "arXiv:2506.01939 (TRL 1.16 top_entropy_quantile)",
           dict(advantage="group_std", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.28,
                aggregation="token_mean", overlong_filter=True, soft_overlong=True, sampling="dynamic",
                top_entropy_quantile=0.2, **_NO_KL),
           note="DAPO (the paper's base recipe) with the policy gradient kept only on the top 20% of tokens by "
                "entropy in the batch; the other tokens stay in the token normaliser (as TRL's top_entropy_quantile)"),
    Method("gfpo", "GFPO", "Shrivastava et al. 2025, Sample More to Think Less: Group Filtered Policy Optimization "
                           "for Concise Reasoning, arXiv:2508.09726",
           dict(advantage="group_std", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.28,
                aggregation="token_mean", sampling="gfpo", gfpo_keep=8, gfpo_metric="length", **_NO_KL),
           regime={"group_size": 16},
           note="sample 16 completions per prompt, train on the 8 shortest: the rejected ones get advantage 0 and "
                "leave the loss, the retained group's mean and std give the baseline (the paper's G=16, k=8; "
                "gfpo_metric=token_efficiency retains the largest reward / length); DAPO's Clip-Higher and "
                "token-level loss as the paper's base; TRL 1.16 ships no GFPO trainer"),
    Method("cispo", "CISPO", "MiniMax 2025, MiniMax-M1, arXiv:2506.13585",
           dict(advantage="group_std", ratio="token", surrogate="cispo", eps_low=1.0, eps_high=4.0,
                aggregation="token_mean", **_NO_KL), regime=_REUSE,
           note="eps_low=1 leaves the weight unbounded below, as in the paper; upper bound 1+4 = TRL's 5.0"),
    Method("cisco", "CISCO", "S. Roy, GRPO Variants (survey), attributed there to Chen et al. 2025",
           dict(advantage="group_std", ratio="token", surrogate="cispo", eps_low=1.0, eps_high=1.0,
                aggregation="seq_mean_token_mean", kl_coef=0.04, kl_estimator="k3", kl_placement="loss"),
           regime={"num_iterations": 2},
           note="the GRPO Variants survey describes IS correction that keeps stale rollouts valid for several steps; realised "
                "as truncated IS weights sg(min(rho, 2)) * A * log pi on rollouts reused twice, GRPO's KL kept"),
    Method("gdpo", "GDPO (decoupled)", "NVIDIA 2026, GDPO, arXiv:2601.05242",
           dict(advantage="decoupled", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="seq_mean_token_mean", **_NO_KL), note="needs a task with several reward components"),
    Method("group_dpo", "Group-DPO", "S. Roy, GRPO Variants (survey), called 'GDPO' there; DPO loss: Rafailov et al. 2023, arXiv:2305.18290",
           dict(surrogate="group_dpo", ratio="token", dpo_beta=0.1, aggregation="seq_mean_token_mean", **_NO_KL),
           note="best vs worst completion of each group, DPO loss against the reference model"),
    Method("reinforce_pp", "REINFORCE++", "Hu et al. 2025, REINFORCE++, arXiv:2501.03262",
           dict(advantage="reinforce_pp", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="token_mean", kl_coef=0.01, kl_estimator="k1", kl_placement="reward")),
    Method("reinforce_pp_baseline", "REINFORCE++-baseline", "Hu et al. 2025, REINFORCE++, arXiv:2501.03262",
           dict(advantage="reinforce_pp_baseline", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="token_mean", kl_coef=0.01, kl_estimator="k1", kl_placement="reward")),
    Method("rloo", "RLOO", "Ahmadian et al. 2024, Back to Basics, arXiv:2402.14740",
           dict(advantage="leave_one_out", ratio="token", surrogate="reinforce", aggregation="seq_mean_token_sum_norm",
                kl_coef=0.05, kl_estimator="k1", kl_placement="reward"),
           note="REINFORCE on sequence log-probs (token sum; the constant 1/L_max only rescales the step)"),
    Method("gmpo", "GMPO", "Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv:2507.20673",
           dict(advantage="group_std", ratio="geometric", surrogate="clip", eps_low=0.4, eps_high=0.4,
                aggregation="seq_mean_token_mean", **_NO_KL), regime=_REUSE),
    Method("sapo", "SAPO", "Gao et al. 2025, Soft Adaptive Policy Optimization, arXiv:2511.20347",
           dict(advantage="group_std", ratio="token", surrogate="sapo", sapo_tau_pos=1.0, sapo_tau_neg=1.05,
                aggregation="seq_mean_token_mean", **_NO_KL), regime=_REUSE),
    Method("spo", "SPO", "Xu & Ding 2025, Single-stream Policy Optimization, arXiv:2509.13232",
           dict(advantage="value_tracker", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="seq_mean_token_mean", tracker_decay=0.9, **_NO_KL),
           regime={"group_size": 2},
           note="TRL needs >= 2 completions per prompt; the tracker's advantage ignores the group, so each "
                "completion is scored as a single stream"),
    Method("clip_cov", "Clip-Cov", "Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617",
           dict(advantage="group_std", ratio="token", surrogate="clip_cov", eps_low=0.2, eps_high=0.2,
                cov_fraction=2e-4, cov_low=1.0, cov_high=5.0, aggregation="token_mean", **_NO_KL)),
    Method("kl_cov", "KL-Cov", "Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617",
           dict(advantage="group_std", ratio="token", surrogate="kl_cov", cov_fraction=2e-3, kl_cov_coef=1.0,
                aggregation="token_mean", **_NO_KL)),
    Method("lite_ppo", "Lite PPO", "Liu et al. 2025, Tricks or Traps? arXiv:2508.08221",
           dict(advantage="batch_std", ratio="token", surrogate="clip", eps_low=0.2, eps_high=0.2,
                aggregation="token_mean", **_NO_KL)),
    Method("vapo", "VAPO", "Yue et al. 2025, VAPO, arXiv:2504.05118",
           dict(advantage="gae", gae_gamma=1.0, gae_lambda_critic=1.0, gae_length_alpha=0.05, critic_warmup=20, ratio="token",
                surrogate="clip", eps_low=0.2, eps_high=0.28, aggregation="token_mean", positive_lm_coef=0.1, **_NO_KL),
           note="value model initialised from the warm-started policy and pretrained for 20 steps with the "
                "policy frozen; decoupled GAE (critic lambda 1), length-adaptive policy lambda (alpha 0.05 is "
                "tuned for long CoT: with toy lengths of ~4 tokens lambda floors at 0; a toy study scales alpha, see "
                "studies/vapo_toy.yaml), Clip-Higher, token-level loss, positive-example LM loss (mu 0.1); value "
                "clipping (value_clip) and advantage whitening (whiten_advantages) are switches, off as in the paper"),
    Method("ppo", "PPO", "Schulman et al. 2017; Ouyang et al. 2022",
           dict(advantage="gae", gae_gamma=1.0, gae_lambda=0.95, gae_lambda_critic=0.95, ratio="token",
                surrogate="clip", eps_low=0.2, eps_high=0.2, aggregation="seq_mean_token_mean", kl_coef=0.05,
                kl_estimator="k1", kl_placement="reward"),
           note="per-token KL to the reference folded into the reward, as in RLHF PPO"),
    Method("gigpo", "GiGPO", "Feng et al. 2025, Group-in-Group Policy Optimization, arXiv:2505.10978",
           dict(advantage="group_std", step_omega=1.0, step_gamma=0.95, anchor_similarity=1.0, ratio="token",
                surrogate="clip", eps_low=0.2, eps_high=0.2, aggregation="token_mean", kl_coef=0.01,
                kl_estimator="k3", kl_placement="loss"),
           note="multi-turn tasks only (task.name: gridworld): episode-level group advantage (Eq. 3) plus omega 1 x "
                "step-level advantage of discounted returns (gamma 0.95) within anchor-state groups (Eqs. 5-8), as in "
                "the paper; KL 0.01 (k3) in the loss and token-mean loss as in verl-agent's recipes; "
                "advantage=group_mean is the paper's mean-only normalisation (verl-agent's default config)"),
    Method("maxrl", "MaxRL", "Tajwar, Zeng et al. 2026, Maximum Likelihood Reinforcement Learning, arXiv:2602.02710",
           dict(advantage="maxrl", **_GRPO_CLIP_TOKEN_MEAN),
           note="A = (r - group mean) / (group mean + 1e-4): a one-line change to GRPO's advantage; binary rewards "
                "(the paper's setting); differs from group_mean by 1/mean, so it acts wherever a group's success "
                "rate is below 1 and not 0; GRPO's clip and a token-mean loss (TRL's default loss_type), not checked "
                "against the paper's loss"),
    # verl 0.9.1's further estimators and policy losses (core_algos.py); tests/algorithms/test_verl_reference.py
    # matches each with verl's own output
    Method("opo", "OPO", "Hao et al. 2025, On-Policy RL with Optimal Reward Baseline, arXiv:2505.23585; "
                         "verl 0.9.1 adv_estimator=opo",
           dict(advantage="opo", **_GRPO_CLIP_TOKEN_MEAN),
           note="length-weighted group baseline sum |o| r / sum |o|; equals group_mean (Dr. GRPO's) when a group's "
                "completions have equal lengths, so it acts only where lengths differ; |o| is the generated length "
                "(a truncated completion counts in full); verl's default clip and token-mean loss, not checked "
                "against the paper's loss"),
    Method("grpo_passk", "GRPO pass@k", "Tang, Zheng, Synnaeve, Munos 2025, Optimizing Language Models for "
                                        "Inference Time Objectives using Reinforcement Learning, ICML 2025, "
                                        "arXiv:2503.19595; verl 0.9.1 adv_estimator=grpo_passk",
           dict(advantage="grpo_passk", adv_eps=1e-6, **_GRPO_CLIP_TOKEN_MEAN),
           note="only each group's best completion moves: r_max - r_second is the paper's leave-one-out pass@k "
                "estimator for k = group size; dividing by (std + 1e-6) is verl's addition (1e-6 is verl's eps; "
                "advantage=grpo_passk outside this row divides by std + adv_eps, default 1e-4); with binary rewards a "
                "group with two or more correct completions gives 0 (its top two tie)"),
    Method("gpg", "GPG", "Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for Model "
                         "Reasoning, arXiv:2504.02546; verl 0.9.1 adv_estimator=gpg, policy_loss gpg",
           dict(advantage="gpg", ratio="token", surrogate="reinforce", aggregation="token_mean", **_NO_KL),
           note="group-centred reward times alpha = N / #non-zero rewards with F_norm = 1: verl's version, not "
                "checked against the paper's estimator (which rescales by the share of samples with a non-zero "
                "gradient and has an F_norm = std option); verl's gpg policy loss -A log pi is surrogate reinforce "
                "(no ratio, no clip, no reference); alpha = 1 when no reward is 0"),
    Method("remax", "ReMax", "Li et al. 2023, ReMax: A Simple, Effective, and Efficient Reinforcement Learning "
                             "Method for Aligning Large Language Models, arXiv:2310.10505; verl 0.9.1 "
                             "adv_estimator=remax",
           dict(advantage="remax", **_GRPO_CLIP_TOKEN_MEAN),
           note="A_i = R_i - R(greedy completion of the prompt), broadcast over the completion's tokens as verl's; the "
                "trainer generates one greedy completion per prompt per rollout and scores it with the run's reward "
                "functions (remax/greedy_reward_mean); on-policy the clip never binds, so the update is the paper's "
                "REINFORCE with the greedy baseline; verl's default clip and token-mean loss"),
    Method("otb", "Optimal token baseline", "verl 0.9.1 adv_estimator=optimal_token_baseline "
                                                               "(verl's own derivation; no paper cited there)",
           dict(advantage="optimal_token_baseline", **_GRPO_CLIP_TOKEN_MEAN),
           note="per-token A_t = G_t - B_t, B_t = sum_i G_it W_it / sum_i W_it over the group, W_t the cumulative "
                "1 - 2 pi_old(y_t) + sum_v pi_old(v)^2 of the sampling policy (the trainer computes the vocabulary "
                "sum only for this estimator: otb/sum_pi_squared_mean); B = group mean when W is equal across the "
                "group; G, W and B over every generated model token (truncated completions included, as verl's); "
                "verl's default clip and token-mean loss; with vLLM, TRL's importance-sampling correction reweights "
                "the loss only (verl also scales W by the squared truncated IS weight; grpolab does not)"),
    Method("tir_otb", "Optimal token baseline (tool turns)",
           "verl 0.9.1 adv_estimator=tir_optimal_token_baseline (verl's own derivation; no paper cited there)",
           dict(advantage="tir_optimal_token_baseline", **_GRPO_CLIP_TOKEN_MEAN),
           note="as otb, with positions counted over the model's own tokens (tool tokens of "
                "multi-turn episodes skipped), so rows align by how many tokens the policy produced; on single-turn "
                "tasks it equals otb"),
    *(Method(f"dppo_{d}", f"DPPO-Binary-{d.upper()}", "DPPO, arXiv:2602.04879; verl 0.9.1 policy_loss "
                                                       f"loss_mode=dppo_{d}",
             dict(advantage="group_std", ratio="token", surrogate=f"dppo_{d}", eps_low=0.2, eps_high=0.2,
                  dual_clip_c=3.0, aggregation="token_mean", **_NO_KL), regime=_REUSE,
             note=f"tokens whose binary {d.upper()} divergence from pi_old exceeds 0.2 in the advantage's direction "
                  "are dropped, the rest weighted by sg(min(rho, 3)); 0.2 and 3 are verl's ActorConfig defaults "
                  "(clip_ratio_low/high, clip_ratio_c), not checked against the paper; two updates per rollout, "
                  "since on-policy nothing is dropped") for d in ("tv", "kl")),
    Method("dro", "DRO (verl's form, no paper)", "no paper: verl 0.9.1 policy_loss loss_mode=dro, a policy "
                                                 "gradient with a quadratic log-ratio penalty (not Richemond et al.'s "
                                                 "Direct Reward Optimization)",
           dict(advantage="group_std", ratio="token", surrogate="dro", dro_beta=0.05, aggregation="token_mean",
                **_NO_KL), regime=_REUSE,
           note="-(A log pi - (beta/2) (log pi - log pi_old)^2), beta 0.05 as verl's usage example; two updates per "
                "rollout, since on-policy the penalty is 0 and the loss is REINFORCE's"),
]}


def get_method(key: str) -> Method:
    if key not in METHODS:
        raise ConfigError(f"method.name: unknown method {key!r}{did_you_mean(key, METHODS)}; valid: {', '.join(METHODS)}")
    return METHODS[key]
