"""The ONE module that touches TRL internals: a GRPOTrainer subclass running grpolab's axes.

Override points (TRL 1.16.0, pinned; tests/test_trl_contract.py fails loudly if they move):
- ``_calculate_rewards``: keep the gathered reward components, plus correctness and lengths.
- ``_generate_and_score_completions``: call TRL, then replace its advantages with
  ``grpolab.algorithms.compute_advantages`` and record the rollout curves.
- ``_compute_loss``: the per-token log-probs and entropies from TRL's patched forward, then
  ``grpolab.algorithms.policy_loss``. Scaled for gradient accumulation here, because TRL sets
  ``loss_is_scaled_for_ga``.
Native TRL settings used where TRL is exact: ``mask_truncated_completions`` (overlong filter),
``num_iterations`` / ``steps_per_generation`` (rollout reuse), the reference model (beta != 0).
"""

from __future__ import annotations

import logging
import os
import math

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from grpolab import algorithms
from grpolab.algorithms.losses import kl_estimate
from grpolab.method.advantages import ADVANTAGES
from grpolab.errors import EmptyUpdatesError, EmptyUpdateWarning, NonFiniteLossError, warn_at_caller
from grpolab.trainer import mlflow_report, sampling
from grpolab.trainer import trl_config as dropin
from grpolab.trainer.critic import CriticMixin
from grpolab.trainer.loss_stats import WindowStats, weighted
from grpolab.trainer.metrics import rollout_metrics, trained_metrics


class GrpoLabTrainer(CriticMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` running a grpolab method: TRL's own arguments, plus ``method=`` (a
    registered name such as ``"dapo"``, ``{"name": "dapo", **axis overrides}`` or a ``MethodSpec``)
    and ``correctness=`` (a reward function's name, a dataset column or a callable; ``dropin.py``
    says what each means). Everything is checked here, before TRL loads a model; the GRPOConfig
    settings the method decides are written into a copy of ``args`` (the user's object is left
    as it was; a user value set away from GRPOConfig's default overrides the method's axis,
    announced once as ``dropin.MethodOverrideWarning``; a default the method changes is warned
    about, once, as ``dropin.MethodSettingsWarning``). Without ``method`` grpolab trains what the
    GRPOConfig says (``dropin.spec_from_trl``: its loss_type, beta, epsilons, ... as axes)."""

    def __init__(self, model, reward_funcs=None, args=None, train_dataset=None, *trl_args,
                 method=None, correctness=None, max_empty_updates=20, **trl_kwargs):
        if isinstance(max_empty_updates, bool) or not isinstance(max_empty_updates, int) or max_empty_updates < 0:
            raise ValueError(f"max_empty_updates: expected an int >= 0 (0 = never fail), got {max_empty_updates!r}")
        self.max_empty_updates, self._empty_streak = max_empty_updates, 0
        n_user = len(reward_funcs) if isinstance(reward_funcs, list) else int(reward_funcs is not None)
        setup = dropin.prepare(model, reward_funcs, args, train_dataset, method, correctness, trl_kwargs)
        self.method_name, spec, args, funcs = setup.method_name, setup.spec, setup.args, setup.reward_funcs
        # grpolab's own reward functions (DAPO's ``overlong``) come after the user's. TRL's "No reward source
        # provided" check must see only the user's: without any, they are added after TRL's __init__ (behind an
        # environment's own ``get_reward``, if it has one), so a run with no reward source raises as in TRL.
        late = funcs[n_user:] if n_user == 0 else []
        if late:
            funcs = funcs[:n_user]
            if args.reward_weights is not None:
                args.reward_weights = args.reward_weights[:n_user]
            if isinstance(trl_kwargs.get("reward_processing_classes"), list):
                trl_kwargs["reward_processing_classes"] = trl_kwargs["reward_processing_classes"][:n_user]
        # the column of DAPO's ``overlong`` reward (None: none): TRL's all-None warning ignores it
        self._own_reward_columns = list(range(len(funcs) - (len(setup.reward_funcs) - n_user), len(funcs)))
        self._correct_kind, self._correct_key = setup.correct_kind, setup.correct_key
        self.spec = spec
        self.tracker = algorithms.ValueTracker(spec.tracker_decay) if ADVANTAGES[spec.advantage].tracker else None
        self.entropy_coef_now = spec.entropy_coef
        self._last_entropy = math.inf   # adaptive_gated: the last optimizer step's entropy (none yet: no bonus)
        self.cumulative_tokens = 0.0
        self.last_rollout: list[dict] = []        # a few rows of the latest rollout, for the samples artifact
        self._stash: dict = {}
        self._entropy_in_loss = False
        self._sampling_rng: torch.Generator | None = None
        self._window, self._step_entropy = WindowStats(), WindowStats()   # loss-side curves (loss_stats.py)
        super().__init__(model, funcs, args, train_dataset, *trl_args, **trl_kwargs)
        if late:
            first = len(self.reward_funcs)
            for func in late:
                self.reward_funcs.append(func)
                self.reward_func_names.append(dropin.reward_func_names([func])[0])
                self.reward_processing_classes.append(None)
            self.reward_weights = torch.cat([self.reward_weights, torch.ones(len(late))])
            self._own_reward_columns = list(range(first, len(self.reward_funcs)))
        # report_to="mlflow": the run named, its params trimmed and tagged as a CLI run's (mlflow_report.py)
        mlflow_report.report_like_the_cli(self, self._describe_run, dropin.mlflow_tags(self.method_name, spec,
                                                                                       self.args.seed))
        self.critic = self.critic_opt = None
        if ADVANTAGES[spec.advantage].critic:
            self._build_critic()

    def _describe_run(self, args, state) -> tuple[str, dict]:
        """(run name, params) of this run as CLI runs have them (``mlflow_report``)."""
        kind, key = self._correct_kind, self._correct_key
        correctness = {"reward": lambda: self.reward_func_names[key], "column": lambda: key,
                       "callable": lambda: getattr(key, "__name__", repr(key)), "none": lambda: "none"}[kind]()
        model_path = getattr(getattr(self.model, "config", None), "_name_or_path", None) or type(self.model).__name__
        params = mlflow_report.dropin_params(self.method_name, self.spec, args, state.max_steps, model_path,
                                             self.reward_func_names, correctness)
        return mlflow_report.dropin_run_name(self.method_name, self.spec, args.seed), params

    # -- rewards ------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards, plus per row (correct, length, truncated, prompt, completion),
        gathered over processes in rank order like the rewards."""
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._warn_unscorable(rewards, prompts, completions)
        eos = self.processing_class.eos_token_id
        correct = self._local_correctness(inputs, prompts, completions, completion_ids_list)
        local = [   # environment datasets may have no prompt column: TRL's own prompt (reset() supplies it)
            (ok, len(ids), (not ids) or ids[-1] != eos, x.get("prompt", p), c)
            for ok, x, p, c, ids in zip(correct, inputs, prompts, completions, completion_ids_list)
        ]
        rows = gather_object(local) if self.accelerator.num_processes > 1 else local
        if self._correct_kind in ("reward", "none"):   # decided on the gathered rewards
            rows = [(ok, *r[1:]) for ok, r in zip(self._correct_from_rewards(rewards), rows)]
        self._stash = {"rewards": rewards, "rows": rows}
        return rewards

    def _warn_unscorable(self, rewards: torch.Tensor, prompts, completions) -> None:
        """TRL's "All reward functions returned None" warning, over the user's reward functions only:
        grpolab's own (DAPO's ``overlong``) always returns a number, so TRL's check never fires."""
        if not self._own_reward_columns:
            return   # TRL's own check saw every column
        user = [i for i in range(rewards.shape[1]) if i not in self._own_reward_columns]
        n = len(prompts)
        local = rewards[self.accelerator.process_index * n:(self.accelerator.process_index + 1) * n, user]
        if not user or not torch.isnan(local).all(dim=1).any():
            return
        row = int(torch.isnan(local).all(dim=1).nonzero(as_tuple=True)[0][0])
        logging.getLogger("trl.trainer.grpo_trainer").warning(
            f"All reward functions returned None for the following kwargs:\n"
            f"{{'prompt': {prompts[row]!r}, 'completion': {completions[row]!r}}}\n"
            "Please ensure that at least one reward function returns a valid reward.")

    def _local_correctness(self, inputs, prompts, completions, completion_ids_list) -> list[bool]:
        kind, key = self._correct_kind, self._correct_key
        if kind == "column":
            return dropin.correct_from_column(completions, [x[key] for x in inputs])
        if kind == "callable":
            columns = {k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")}
            out = key(prompts=prompts, completions=completions, completion_ids=completion_ids_list,
                      trainer_state=self.state, **columns)
            return [bool(v) for v in out]
        return [False] * len(inputs)   # filled in from the gathered rewards

    def _correct_from_rewards(self, rewards: torch.Tensor) -> list[bool]:
        """``correctness=<reward name>``: that reward > 0. None: the stand-in, total reward above
        its group's mean (curves renamed, ``dropin.PROXY_NAMES``)."""
        if self._correct_kind == "reward":
            return dropin.correct_from_reward(rewards[:, self._correct_key].tolist())
        total = algorithms.combine_rewards(rewards, self.spec.reward_weights).float()
        G = self.num_generations if self.model.training else self.num_generations_eval
        if total.numel() % G:
            return (total > total.nanmean()).tolist()
        grouped = total.view(-1, G)   # unscorable (NaN) rows: never above, and out of the mean
        return (grouped > grouped.nanmean(1, keepdim=True)).view(-1).tolist()

    # -- advantages ---------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if self.spec.sampling == "dynamic":
            out, rewards_k, rows, generated = self._dynamic_sampling(inputs)
        else:
            out = super()._generate_and_score_completions(inputs)
            rewards_k, rows = self._stash["rewards"], self._stash["rows"]
            self._entropy_in_loss = self._loss_sees_pi_old_on_every_token(out)
            generated = {"rewards": rewards_k, "rows": rows,
                         "entropy": None if self._entropy_in_loss else self._entropy_sums(out)}
            if self.spec.sampling == "zero_variance_filter":
                self._filter_zero_variance(out, rewards_k, rows)
        G, device = self.num_generations, rewards_k.device
        n_local = out["completion_ids"].size(0)
        start = self.accelerator.process_index * n_local
        mask = (out["completion_mask"] * out.get("tool_mask", 1)).float()   # model tokens (env tokens: tool_mask 0)
        penalty = self._token_kl_penalty(out, mask) if self._kl_in_reward else None
        total = algorithms.combine_rewards(rewards_k, self.spec.reward_weights)
        rewards_adj = rewards_k
        if penalty is not None:
            seq_pen = self._gather((penalty * mask).sum(-1))
            self._metrics["train"]["kl_reward_penalty"].append(seq_pen.mean().item())
            if not ADVANTAGES[self.spec.advantage].kl_per_token:   # those fold it in per token
                rewards_adj = total - seq_pen   # (N,): the weights are already in ``total``, never applied twice
        retained = None   # GFPO: the rows in the baselines; the group curves and the zero-advantage cause read them
        if self.spec.sampling == "gfpo":
            kept = self._gfpo(out, rewards_adj, start)
            rewards_adj, retained = kept.rewards, kept.retained
        reduce = (lambda t: self.accelerator.reduce(t, reduction="sum")) if self.accelerator.num_processes > 1 else None
        if self.critic is not None:
            out["old_values"] = self._critic_values(out, grad=False)
            advantages, out["returns"] = algorithms.gae_advantages(
                self.spec, rewards_adj[start:start + n_local], out["old_values"], mask, penalty, reduce=reduce)
        else:
            advantages = algorithms.compute_advantages(
                self.spec, rewards_adj, G, mask=mask, token_penalty=penalty, prompt_keys=[r[3] for r in rows],
                tracker=self.tracker, local_rows=slice(start, start + n_local), reduce=reduce,
                lengths=self._gather(self._generated_mask(out, rows, start).sum(1)),   # before any filter's masking
            )
        if self.tracker is not None:
            self._metrics["train"]["tracker/prompts"].append(float(len(self.tracker.state)))
        if advantages.dim() == 1:
            advantages = advantages[start:start + n_local]
        if hasattr(self.rollout_func, "finish"):   # multi-turn episodes: their curves; GiGPO's per-token term (envs/)
            advantages, episode_stats = self.rollout_func.finish(self.spec, advantages, out["completion_ids"].size(1))
            for key, value in episode_stats.items():
                self._metrics["train"][key].append(value)
        out["advantages"] = advantages.to(device)
        out["group_ids"] = (torch.arange(total.numel(), device=device) // G)[start:start + n_local]
        out["seq_rewards"] = total[start:start + n_local]
        out["correct"] = torch.tensor([bool(r[0]) for r in rows], device=device)[start:start + n_local]
        trained_rows = self._gather((out["completion_mask"].sum(1) > 0).float()).bool().cpu()
        self._record_rollout(total, rows, trained_rows, generated, G, retained)
        in_baseline = total if retained is None else total.masked_fill(~retained.to(total.device), float("nan"))
        self._check_update_signal(out, in_baseline, rows, trained_rows, generated, G)
        return out

    # -- nothing inert at run time ---------------------------------------------------------
    def _other_gradient_terms(self) -> list[str]:
        """Loss terms that give the policy a gradient when every advantage is 0."""
        spec, terms = self.spec, []
        if spec.kl_coef > 0 and spec.kl_placement == "loss":
            terms.append("in-loss KL")
        if self.entropy_coef_now or spec.entropy_mode != "static":
            terms.append("entropy bonus")
        if spec.positive_lm_coef > 0:
            terms.append("positive-example LM loss")
        if getattr(self, "aux_loss_enabled", False):
            terms.append("MoE router auxiliary loss")
        return terms

    def _check_update_signal(self, out: dict, total: torch.Tensor, rows: list, trained_rows: torch.Tensor,
                             generated: dict, G: int) -> None:
        """An update batch whose loss gives the policy no gradient -- every row masked out of the loss,
        or every trained token's advantage 0 with no other loss term -- is warned about (its cause)
        at the first of a streak; ``max_empty_updates`` such batches in a row raise EmptyUpdatesError
        (0: never). Decided on gathered values, so every process raises together."""
        mask = (out["completion_mask"] * out.get("tool_mask", 1)).float()
        A = out["advantages"]
        A = A.unsqueeze(1) if A.dim() == 1 else A
        signal = ((A.abs() > 0).float() * mask).sum().reshape(1)
        if self.accelerator.num_processes > 1:
            signal = self.accelerator.reduce(signal, reduction="sum")
        if not trained_rows.any():
            cause = self._no_rows_cause(generated, G)
        elif float(signal) == 0 and not self._other_gradient_terms():
            cause = self._zero_advantage_cause(total, rows, G)
        else:
            self._empty_streak = 0
            return
        self._empty_streak += 1
        limit = self.max_empty_updates
        if self._empty_streak == 1:
            warn_at_caller(f"GrpoLabTrainer: update batch at step {self.state.global_step} gives the policy no "
                           f"gradient: {cause}" + (f"; the run fails after {limit} such batches in a row "
                                                   "(max_empty_updates)" if limit else ""), EmptyUpdateWarning)
        if limit and self._empty_streak >= limit:
            raise EmptyUpdatesError(f"{self._empty_streak} update batches in a row gave the policy no gradient "
                                    f"(max_empty_updates={limit}; CLI: train.max_empty_updates, 0 = never fail), up "
                                    f"to step {self.state.global_step}: {cause}")

    def _no_rows_cause(self, generated: dict, G: int) -> str:
        gen_rows = generated["rows"]
        n, truncated = len(gen_rows), sum(bool(r[2]) for r in gen_rows)
        parts = []
        if self.args.mask_truncated_completions and truncated:
            parts.append(f"{truncated} of {n} completions hit max_completion_length={self.max_completion_length} "
                         "without EOS and the overlong filter (method.overlong_filter, GRPOConfig."
                         "mask_truncated_completions) masks truncated completions out of the loss")
        if self.spec.sampling == "zero_variance_filter":
            parts.append(f"method.sampling=zero_variance_filter dropped every group whose "
                         f"{self.spec.sampling_filter} does not vary")
        return ("every row of the update batch is masked out of the loss: " + "; ".join(parts or [
            "no completion token is left in the loss mask"]))

    def _zero_advantage_cause(self, total: torch.Tensor, rows: list, G: int) -> str:
        flat = (sampling.group_spread(total.float().cpu(), G) <= sampling.ZERO_VARIANCE_TOL)
        zero, groups = int(flat.sum()), flat.numel()
        where = {"static": "method.sampling=static trains them as they come",
                 "dynamic": f"method.sampling=dynamic hit its round cap (max_sampling_rounds="
                            f"{self.spec.max_sampling_rounds}) and filled the batch with them",
                 "zero_variance_filter": "method.sampling=zero_variance_filter",
                 "gfpo": "method.sampling=gfpo trains the retained completions as they come"}[self.spec.sampling]
        masked = sum(bool(r[2]) for r in rows) if self.args.mask_truncated_completions else 0
        extra = (f"; the overlong filter (method.overlong_filter) masked {masked} truncated completions"
                 if masked else "")
        return (f"every trained completion has advantage 0 ({zero} of {groups} groups have equal rewards, so "
                f"method.advantage={self.spec.advantage} gives them 0; {where}){extra}, and no other loss "
                "term (in-loss KL, entropy bonus) gives a gradient")

    # -- sampling -----------------------------------------------------------------------
    def _keep_values(self, rewards_k: torch.Tensor, rows: list) -> torch.Tensor:
        """Per-row values a group must disagree on to be kept (``method.sampling_filter``)."""
        total = algorithms.combine_rewards(rewards_k, self.spec.reward_weights)
        return sampling.filter_values(self.spec.sampling_filter, total, torch.tensor([bool(r[0]) for r in rows]))

    def _dynamic_sampling(self, inputs):
        """DAPO dynamic sampling: generate rounds of groups (TRL's own generation and scoring)
        until the global batch holds ``target`` groups whose accuracy (or reward, per
        ``sampling_filter``) varies, or the cap is hit, then rebuild one batch of exactly the
        configured size. Decisions use gathered values, so every rank keeps the same groups and
        ends with the same number of rows. Returns the local batch, the kept rows' rewards and
        rows, and the generated population (every round) for the curves."""
        G, n_local, nproc = self.num_generations, len(inputs), self.accelerator.num_processes
        if n_local % G:
            raise NotImplementedError("dynamic sampling needs whole groups on each process "
                                      f"({n_local} rows per process, group size {G})")
        target = n_local * nproc // G
        pool, rewards, rows, round_inputs = [], [], [], inputs
        entropy = torch.zeros(2, dtype=torch.float64)
        for round_no in range(1, self.spec.max_sampling_rounds + 1):
            out = super()._generate_and_score_completions(round_inputs)
            entropy += self._entropy_sums(out)
            pool.append(self._gather_rows(out))
            rewards.append(self._stash["rewards"])
            rows.extend(self._stash["rows"])
            values = self._keep_values(torch.cat(rewards), rows)
            if int((sampling.group_spread(values, G) > sampling.ZERO_VARIANCE_TOL).sum()) >= target:
                break
            round_inputs = self._fresh_inputs(n_local)
        groups, filled = sampling.select_groups(values, G, target, self.spec.sampling_cap_policy)
        if filled:
            warn_at_caller(f"dynamic sampling: round cap {self.spec.max_sampling_rounds} reached, "
                           f"{filled} of {target} groups are zero-variance fill-ins")
        keep = sampling.rows_of_groups(groups, G)
        merged = sampling.take_rows(sampling.concat_batches(pool, self.processing_class.pad_token_id), keep)
        start = self.accelerator.process_index * n_local
        local = {k: v[start:start + n_local] for k, v in merged.items()}
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        local["num_items_in_batch"] = loss_mask.sum()   # the whole final batch, all processes
        local["advantages"] = torch.zeros(n_local, device=merged["completion_mask"].device)
        kept = set(keep.tolist())
        m = self._metrics["train"]
        m["sampling/rounds"].append(float(round_no))
        m["sampling/kept_fraction"].append(target / (len(rows) // G))
        m["sampling/filled_groups"].append(float(filled))
        m["sampling/discarded_tokens"].append(float(sum(r[1] for i, r in enumerate(rows) if i not in kept)))
        all_rewards = torch.cat(rewards)
        generated = {"rewards": all_rewards, "rows": rows, "entropy": entropy}
        return local, all_rewards[keep.to(all_rewards.device)], [rows[i] for i in keep.tolist()], generated

    def _gather_rows(self, out: dict) -> dict:
        """Row-aligned tensors of every process, padded to a common width, in rank order."""
        fields = {k: v for k, v in out.items() if k not in sampling.RECOMPUTED}
        if self.accelerator.num_processes == 1:
            return fields
        gathered = {}
        for key, value in fields.items():
            left = key in sampling.LEFT_PADDED
            pad = self.processing_class.pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            value = self.accelerator.pad_across_processes(value, dim=1, pad_index=pad, pad_first=left)
            gathered[key] = self.accelerator.gather(value)
        return gathered

    def _fresh_inputs(self, n_rows: int) -> list[dict]:
        """n_rows / G fresh prompts from the training set, each repeated G times (rank-seeded)."""
        if self._sampling_rng is None:
            self._sampling_rng = torch.Generator().manual_seed(self.args.seed * 7919 + self.accelerator.process_index)
        picks = torch.randint(len(self.train_dataset), (n_rows // self.num_generations,), generator=self._sampling_rng)
        return [dict(self.train_dataset[int(i)]) for i in picks for _ in range(self.num_generations)]

    def _filter_zero_variance(self, out: dict, rewards_k: torch.Tensor, rows: list) -> None:
        """No refill: groups whose accuracy (or reward) does not vary leave the loss and the normaliser."""
        G, n_local = self.num_generations, out["completion_ids"].size(0)
        values = self._keep_values(rewards_k, rows)
        informative = (sampling.group_spread(values, G) > sampling.ZERO_VARIANCE_TOL).repeat_interleave(G)
        start = self.accelerator.process_index * n_local
        keep = informative[start:start + n_local].to(out["completion_mask"].device)
        out["completion_mask"] = out["completion_mask"] * keep.unsqueeze(1).to(out["completion_mask"].dtype)
        local_items = (out["completion_mask"] * out.get("tool_mask", 1)).sum()
        out["num_items_in_batch"] = self._gather(local_items.unsqueeze(0)).sum()
        self._metrics["train"]["sampling/kept_fraction"].append(informative.float().mean().item())

    def _gfpo(self, out: dict, rewards: torch.Tensor, start: int) -> sampling.GfpoFiltered:
        """GFPO's group filter (``sampling.gfpo_filter``); its curves."""
        kept = sampling.gfpo_filter(out, rewards, self.spec, self.num_generations, start, self._gather)
        self._metrics["train"]["sampling/kept_fraction"].append(kept.kept_fraction)
        self._metrics["train"]["gfpo/length_gap"].append(kept.length_gap)
        return kept

    @property
    def _kl_in_reward(self) -> bool:
        return self.spec.kl_coef > 0 and self.spec.kl_placement == "reward"

    def _token_kl_penalty(self, out, mask):
        """beta * KL_t(pi_old || pi_ref) per token, detached: the reward-side KL (REINFORCE++, RLOO)."""
        old = out.get("old_per_token_logps")
        if old is None:  # on-policy: TRL skipped the old log-probs; the current policy is pi_old
            with torch.no_grad():
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
                attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
                old, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attn, out["completion_ids"].size(1))
        return self.spec.kl_coef * kl_estimate(old, out["ref_per_token_logps"], self.spec.kl_estimator).detach() * mask

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        return self.accelerator.gather(t) if self.accelerator.num_processes > 1 else t

    def _loss_sees_pi_old_on_every_token(self, out: dict) -> bool:
        """Whether the loss forwards of this generation batch see exactly the ``entropy`` curve's
        population under pi_old: every generated row trained (static sampling, no truncation mask,
        no environment tokens) and no optimizer step before the last micro-batch (one pass, one
        optimizer step per generation). Then the loss's own token-weighted entropy is that curve,
        and ``_entropy_sums``' extra forward (13 % of a small-model fp32 step) is skipped."""
        return (self.spec.sampling == "static" and not self.args.mask_truncated_completions
                and "tool_mask" not in out and self.num_iterations == 1
                and self.args.steps_per_generation == self.args.gradient_accumulation_steps)

    def _generated_mask(self, out: dict, rows: list, start: int, model_only: bool = True) -> torch.Tensor:
        """(n_local, T): ones over each generated completion's tokens (its length from the rollout's
        ``rows``), before the zero-variance filter or ``mask_truncated_completions`` zero rows of the
        loss's mask; ``model_only``: the model's own tokens (tool tokens of multi-turn episodes out)."""
        ids = out["completion_ids"]
        lengths = torch.tensor([r[1] for r in rows[start:start + ids.size(0)]], device=ids.device)
        attend = (torch.arange(ids.size(1), device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)).to(out["prompt_mask"].dtype)
        return attend * out["tool_mask"] if model_only and "tool_mask" in out else attend

    @torch.no_grad()
    def _entropy_sums(self, out: dict) -> torch.Tensor:
        """(sum of per-token entropy, tokens) of pi_old over every generated completion token of
        this process's rows (one no-grad forward per generation round): the ``entropy`` curve.
        Its tokens are the loss's: TRL's ``completion_mask``, ones over each returned id list (an EOS
        inside a rollout_func's completion does not end it; padding after a vLLM stop string or to
        ``pad_to_multiple_of`` is out), before ``mask_truncated_completions`` zeroes truncated rows
        (lengths: ``_calculate_rewards``' stash of this round)."""
        ids, T, n = out["completion_ids"], out["completion_ids"].size(1), out["completion_ids"].size(0)
        attend = self._generated_mask(out, self._stash["rows"], self.accelerator.process_index * n, model_only=False)
        valid = attend * out["tool_mask"] if "tool_mask" in out else attend   # multi-turn: the model's own tokens
        _, ent, _ = self._get_per_token_logps_and_entropies(
            self.model, torch.cat([out["prompt_ids"], ids], 1), torch.cat([out["prompt_mask"], attend], 1), T,
            compute_entropy=True)
        return torch.stack([(ent.double() * valid).sum(), valid.double().sum()]).cpu()

    def _record_rollout(self, total: torch.Tensor, rows: list, trained_rows: torch.Tensor, generated: dict,
                        G: int, retained: torch.Tensor | None = None) -> None:
        """Curves once per generation batch, in two populations: unprefixed over every completion
        generated for it (all dynamic-sampling rounds, before any filter), ``trained/`` over the
        rows the update uses (``metrics.trained_metrics``)."""
        gen_rows = generated["rows"]
        gen_total = algorithms.combine_rewards(generated["rewards"], self.spec.reward_weights)
        stats = rollout_metrics(gen_total.float().cpu(), torch.tensor([bool(r[0]) for r in gen_rows]),
                                torch.tensor([r[1] for r in gen_rows], dtype=torch.float32),
                                torch.tensor([bool(r[2]) for r in gen_rows]), G,
                                overlong=(self.max_completion_length, self.spec.overlong_buffer))
        stats.update(trained_metrics(total.float().cpu(), torch.tensor([bool(r[0]) for r in rows]),
                                     torch.tensor([r[1] for r in rows], dtype=torch.float32), trained_rows, G,
                                     retained))
        if self._correct_kind == "none":   # "correct" was the stand-in: the names say so
            stats = dropin.rename_for_proxy(stats)
        ent = generated["entropy"]   # None: the loss logs it (_loss_sees_pi_old_on_every_token)
        if ent is not None and self.accelerator.num_processes > 1:
            ent = self.accelerator.reduce(ent.to(self.accelerator.device), reduction="sum").cpu()
        if ent is not None and ent[1] > 0:
            stats["entropy"] = float(ent[0] / ent[1])
        self.cumulative_tokens += stats["tokens/generated"]
        stats["tokens/cumulative"] = self.cumulative_tokens
        stats["override/advantage"] = 1.0
        for key, value in stats.items():
            self._metrics["train"][key].append(value)
        self.last_rollout = [
            {"prompt": r[3], "completion": r[4], "reward": float(total[i]), "correct": bool(r[0]), "length": r[1]}
            for i, r in enumerate(rows[: 4 * G])
        ]

    # -- loss ---------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        if "tool_mask" in inputs:   # multi-turn episodes: environment tokens are attended to, never trained
            completion_mask = completion_mask * inputs["tool_mask"]
        logp, entropies, aux_loss = self._get_per_token_logps_and_entropies(  # entropy: a curve for every method
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled)   # MoE: the router's load-balancing loss, as TRL requests it
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        keep = None
        if self.off_policy_mask_threshold is not None:   # TRL's own off-policy sequence mask (trl_config.TRL_FIELDS)
            A = inputs["advantages"]
            keep = self.get_off_policy_mask(A.unsqueeze(1) if A.dim() == 1 else A, logp,
                                            inputs.get("sampling_per_token_logps", old), completion_mask,
                                            self.off_policy_mask_threshold)
        training = self.model.training
        spg = self.args.steps_per_generation if training else 1
        token_normaliser = inputs["num_items_in_batch"] / self.accelerator.num_processes / spg
        loss, stats = algorithms.policy_loss(
            self.spec, logp, old, inputs["advantages"], completion_mask, inputs.get("ref_per_token_logps"),
            token_normaliser=token_normaliser, max_completion_length=self.max_completion_length,
            entropies=entropies, entropy_coef=self._entropy_coef_applied(), rewards=inputs.get("seq_rewards"),
            group_ids=inputs.get("group_ids"), gather=self._gather_valid if self.accelerator.num_processes > 1 else None,
            positive=inputs.get("correct"),
            sampling_weights=inputs.get("importance_sampling_ratio"),  # TRL's vLLM correction (engines.py)
            keep=keep,
        )
        trl_stats = {k: stats.pop(k) for k in list(stats) if k in algorithms.TRL_NAMED_STATS}
        if self.aux_loss_enabled:   # as TRL 1.16: + coef * aux_loss, scaled for gradient accumulation below
            loss = loss + self.router_aux_loss_coef * aux_loss
            trl_stats["aux_loss"] = float(aux_loss.detach())
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"non-finite loss {loss.item()} at step {self.state.global_step}")
        self._log_trl_stats(trl_stats, "train" if training else "eval", float(completion_mask.sum()))
        stats["trained/entropy"] = stats.pop("entropy", float("nan"))
        if training and self._entropy_in_loss:   # the trained tokens are all generated tokens, under pi_old
            stats["entropy"] = stats["trained/entropy"]
        if training:
            loss = loss / self.current_gradient_accumulation_steps
            if self.critic is not None:
                stats["critic/value_loss"] = self._train_critic(inputs)
                if self._critic_micro_steps <= self.spec.critic_warmup * self.current_gradient_accumulation_steps:
                    loss = loss * 0.0   # value pretraining: the policy waits until the critic has learned
                    stats["critic/warmup"] = 1.0
            self._accumulate_loss_stats(stats, float(completion_mask.sum()))
        else:
            for key, value in stats.items():
                if not (isinstance(value, float) and math.isnan(value)):
                    self._metrics["eval"][key].append(value)
        self._metrics["train"]["override/loss"].append(1.0)
        return loss

    def _log_trl_stats(self, stats: dict, mode: str, tokens: float) -> None:
        """TRL's own loss-side curves (``algorithms.TRL_NAMED_STATS``, ``aux_loss``) under TRL's names,
        once per micro-batch as TRL logs them (its ``log`` averages over the logging window), combined
        over processes as TRL combines them: the token fractions ``clip_ratio/*_mean`` and
        ``cispo_clip_ratio`` as token-weighted means over every process's tokens (TRL's
        ``global_masked_mean``), ``clip_ratio/low_min`` by nanmin, ``clip_ratio/high_max`` by nanmax,
        ``policy_loss`` and ``aux_loss`` by the mean over processes. The MLflow recorder of CLI runs
        drops the ones that duplicate grpolab's curves."""
        if not stats:
            return
        keys = sorted(stats)
        if self.accelerator.num_processes > 1:
            row = [tokens, *(stats[k] for k in keys)]
            t = torch.tensor(row, dtype=torch.float32, device=self.accelerator.device)
            t = self.accelerator.gather(t.unsqueeze(0)).view(-1, len(keys) + 1).double().cpu()
            weights, values = t[:, 0], t[:, 1:]

            def token_weighted(c):
                ok = ~c.isnan() & (weights > 0)
                return (c[ok] * weights[ok]).sum() / weights[ok].sum() if ok.any() else c[0]
            combine = {"clip_ratio/low_min": lambda c: c[~c.isnan()].min() if (~c.isnan()).any() else c[0],
                       "clip_ratio/high_max": lambda c: c[~c.isnan()].max() if (~c.isnan()).any() else c[0],
                       "clip_ratio/low_mean": token_weighted, "clip_ratio/high_mean": token_weighted,
                       "clip_ratio/region_mean": token_weighted, "cispo_clip_ratio": token_weighted}
            stats = {k: float(combine.get(k, torch.nanmean)(values[:, i])) for i, k in enumerate(keys)}
        for key in keys:
            self._metrics[mode][key].append(float(stats[key]))

    def _accumulate_loss_stats(self, stats: dict, tokens: float) -> None:
        """Loss-side curves reduced over every micro-batch of a generation batch (all its passes,
        fresh and reused) and over every process, logged once per generation batch; the adaptive
        entropy coefficient reads the trained-token entropy of each optimizer step, also global."""
        stats = {k: v for k, v in stats.items() if not (k in ("entropy", "trained/entropy") and math.isnan(v))}
        pairs = weighted(stats, tokens, self.accelerator.num_processes)
        self._window.add(pairs)
        if "trained/entropy" in pairs:
            self._step_entropy.add({"trained/entropy": pairs["trained/entropy"]})
        reduce_sum = self._reduce_sum if self.accelerator.num_processes > 1 else None
        if self.accelerator.sync_gradients:
            self._update_entropy_coef(self._step_entropy.emit(reduce_sum).get("trained/entropy"))
            if self.spec.entropy_mode == "static" and self.entropy_coef_now:   # as TRL logs a static bonus
                self._metrics["train"]["entropy_coef"].append(self.entropy_coef_now)
        if (self._step + 1) % (self.args.steps_per_generation * self.num_iterations) == 0:
            for key, value in self._window.emit(reduce_sum).items():
                self._metrics["train"][key].append(value)

    def _reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(t.to(self.accelerator.device), reduction="sum").cpu()

    def _gather_valid(self, values: torch.Tensor) -> torch.Tensor:
        """A 1-D tensor of different length on each process -> all of them, on every process."""
        sizes = self.accelerator.gather(torch.tensor([values.numel()], device=values.device))
        padded = torch.full((int(sizes.max()),), float("nan"), dtype=values.dtype, device=values.device)
        padded[:values.numel()] = values
        gathered = self.accelerator.gather(padded)
        return gathered[~torch.isnan(gathered)]

    def _entropy_coef_applied(self) -> float:
        """The entropy-bonus coefficient of this micro-batch. ``adaptive_gated`` (TRL's controller,
        Skywork-OR1): the coefficient only while the previous optimizer step's entropy was <= the
        target, none before the first step."""
        if self.spec.entropy_mode == "adaptive_gated" and not self._last_entropy <= self.spec.entropy_target:
            return 0.0
        return self.entropy_coef_now

    def _update_entropy_coef(self, entropy: float | None) -> None:
        """Adaptive entropy bonus, once per optimizer step (at the accumulation boundary), from the
        entropy of the step's trained tokens over every process: coef + step (at most
        entropy_coef_max) while the entropy is below the target (``adaptive_gated``, as TRL: <=),
        else coef - step (at least entropy_coef_min)."""
        spec = self.spec
        if spec.entropy_mode == "static" or entropy is None:
            return
        below = entropy <= spec.entropy_target if spec.entropy_mode == "adaptive_gated" else entropy < spec.entropy_target
        if below:
            self.entropy_coef_now = min(self.entropy_coef_now + spec.entropy_coef_step, spec.entropy_coef_max)
        else:
            self.entropy_coef_now = max(self.entropy_coef_now - spec.entropy_coef_step, spec.entropy_coef_min)
        self._last_entropy = entropy
        # TRL's attributes, as TRL's controller keeps them: its checkpoint (entropy_ctrl_state.json) saves these
        self.entropy_coef, self._last_world_entropy = self.entropy_coef_now, entropy
        self._metrics["train"]["entropy_coef"].append(self.entropy_coef_now)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """TRL restores its adaptive entropy controller from the checkpoint here (``entropy_coef``,
        ``_last_world_entropy``); grpolab's controller continues from the same state, so a resumed
        run trains as stock TRL's does."""
        super()._load_optimizer_and_scheduler(checkpoint)
        restored = checkpoint is not None and os.path.exists(os.path.join(checkpoint, "entropy_ctrl_state.json"))
        if self.spec.entropy_mode == "adaptive_gated" and getattr(self, "use_adaptive_entropy", False) and restored:
            self.entropy_coef_now, self._last_entropy = float(self.entropy_coef), float(self._last_world_entropy)

    # -- logging ----------------------------------------------------------------------------
    def log(self, logs: dict, start_time: float | None = None) -> None:
        """TRL's ``log``, less the curves with no value in this window. TRL averages each curve's
        non-NaN values and passes None where none is left (``length/correct`` at a step where no
        completion was correct; a reward function that returned None for every completion); MLflow
        refuses None with a warning per key and step, JSON loggers store null. Such a curve is left
        out of the step instead, as CLI runs leave it out (docs/metrics.md)."""
        mode = "train" if self.model.training else "eval"
        for key in [k for k, values in self._metrics[mode].items() if all(math.isnan(v) for v in values)]:
            del self._metrics[mode][key]
        super().log(logs, start_time)

    # -- held-out eval through TRL's vLLM engine (vllm_eval.py) ---------------------------
    def sync_generation_weights(self) -> None:
        """Push the current weights into TRL's vLLM engine unless this step's are there already.
        TRL's own tag (``_last_loaded_step``) is updated, so the next training generation does not
        push them again. Every process calls it: TRL gathers sharded parameters collectively."""
        vllm = getattr(self, "vllm_generation", None) if self.use_vllm else None
        if vllm is None:
            return
        if self.state.global_step != self._last_loaded_step or getattr(vllm, "_llm_weights_sleeping", False):
            vllm.sync_weights()
            self._last_loaded_step = self.state.global_step

    def vllm_completions(self, prompt_ids: list[list[int]], n: int, max_tokens: int, greedy: bool) -> list[list[int]]:
        """n completion token rows per prompt (prompt-major) from the vLLM engine training samples
        with, under the trainer's sampling settings (temperature, top_p, top_k, min_p, repetition
        penalty, generation_kwargs) and without log-probs; greedy sets temperature 0 (vLLM's
        argmax). Main process only: colocate uses this process's ``llm``, server mode the client
        TRL holds on the main process (TRL's own ``generate`` gathers over every process)."""
        vllm = self.vllm_generation
        params = {"n": n, "repetition_penalty": vllm.repetition_penalty, "temperature": vllm.temperature,
                  "top_p": vllm.top_p, "top_k": vllm.top_k, "min_p": vllm.min_p or 0.0, "max_tokens": max_tokens,
                  "logprobs": None}
        greedy_override = {"temperature": 0.0} if greedy else {}
        if vllm.mode == "server":
            out = vllm.vllm_client.generate(prompts=prompt_ids, structured_outputs_regex=vllm.structured_outputs_regex,
                                            generation_kwargs={**vllm.generation_kwargs, **greedy_override}, **params)
            return [list(ids) for ids in out["completion_ids"]]
        from trl.generation import vllm_generation  # the SamplingParams TRL builds its own requests with
        if vllm.structured_outputs_regex is not None:
            raise NotImplementedError("held-out eval through vLLM with structured_outputs_regex")
        sampling = vllm_generation.SamplingParams(**{**params, **vllm.generation_kwargs, **greedy_override})
        if vllm.enable_sleep_mode:
            vllm.llm.wake_up(tags=["kv_cache"])
        outputs = vllm.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], sampling_params=sampling,
                                    use_tqdm=False)
        if vllm.enable_sleep_mode:   # as TRL's generate leaves it: weights dropped, re-pushed before next use
            vllm.llm.sleep(level=2)
            vllm._llm_weights_sleeping = True
        return [list(c.token_ids) for request in outputs for c in request.outputs]


GrpoLabTrainer.__init__.__signature__ = dropin.dropin_signature(GRPOTrainer.__init__)   # TRL's names, not *args
