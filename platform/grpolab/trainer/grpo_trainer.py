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

import math
import os

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from grpolab import algorithms
from grpolab.algorithms.kl import kl_estimate
from grpolab.errors import NonFiniteLossError
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.entropy_modes import ENTROPY_MODES
from grpolab.method.kl import kl_in_reward
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.tracking.metric_catalog import trl_loss_keys
from grpolab.trainer import mlflow_report
from grpolab.trainer import dropin
from grpolab.trainer.benchmark_eval import BenchmarkEvaluation, resolve_answer_extractor
from grpolab.trainer.correctness import CorrectnessRules
from grpolab.trainer.critic import CriticMixin
from grpolab.trainer.empty_updates import EmptyUpdateChecks
from grpolab.trainer.entropy_control import EntropyController
from grpolab.trainer.estimator_inputs import EstimatorInputs, check_whole_groups
from grpolab.trainer.grpolab_state import GrpolabState
from grpolab.trainer.loss_stats import WindowStats, weighted
from grpolab.trainer.metrics import rollout_metrics, trained_metrics
from grpolab.trainer.group_sampling import GroupSampling
from grpolab.trainer.pi_old_entropy import PiOldEntropy
from grpolab.trainer.sampling import PromptDraws
from grpolab.trainer.step_times import RunCounters, StepTimes
from grpolab.trainer.rollouts import (Generated, RolloutRow, ScoredRound, completion_rows, correct_of, generated_mask,
                                      lengths_of, truncated_of)
from grpolab.trainer.vllm_engine import VllmEngineAccess

class GrpoLabTrainer(CriticMixin, CorrectnessRules, EmptyUpdateChecks, GroupSampling, EstimatorInputs, PiOldEntropy,
                     VllmEngineAccess, StepTimes, BenchmarkEvaluation, GrpolabState, GRPOTrainer):
    """``trl.GRPOTrainer`` running a grpolab method: TRL's own arguments, plus ``method=`` (a
    registered name such as ``"dapo"``, ``{"name": "dapo", **axis overrides}`` or a ``MethodSpec``)
    and ``correctness=`` (a reward function's name, a dataset column or a callable; ``trainer/dropin.py``
    says what each means); ``answer_extractor=`` (a callable or an extractor name) gives the
    evaluation's majority vote its answers (trainer/benchmark_eval.py). Everything is checked here, before TRL loads a model; the GRPOConfig
    settings the method decides are written into a copy of ``args`` (the user's object is left
    as it was; a user value set away from GRPOConfig's default overrides the method's axis,
    announced once as ``dropin.MethodOverrideWarning``; a default the method changes is warned
    about, once, as ``dropin.MethodSettingsWarning``). Without ``method`` grpolab trains what the
    GRPOConfig says (``dropin.spec_from_trl``: its loss_type, beta, epsilons, ... as axes)."""

    def __init__(self, model, reward_funcs=None, args=None, train_dataset=None, *trl_args,
                 method=None, correctness=None, max_empty_updates=20, answer_extractor=None, **trl_kwargs):
        if isinstance(max_empty_updates, bool) or not isinstance(max_empty_updates, int) or max_empty_updates < 0:
            raise ValueError(f"max_empty_updates: expected an int >= 0 (0 = never fail), got {max_empty_updates!r}")
        self.max_empty_updates = max_empty_updates
        n_user = len(reward_funcs) if isinstance(reward_funcs, list) else int(reward_funcs is not None)
        setup = dropin.prepare(model, reward_funcs, args, train_dataset, method, correctness, trl_kwargs)
        self.method_name, spec, args, funcs = setup.method_name, setup.spec, setup.args, setup.reward_funcs
        check_whole_groups(spec.advantage, args)
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
        self._answer_extract, self._answer_equivalent = resolve_answer_extractor(answer_extractor, correctness)
        self.spec = spec
        self.tracker = algorithms.ValueTracker(spec.tracker_decay) if ADVANTAGES[spec.advantage].tracker else None
        self.entropy_control = EntropyController(spec)
        self.counters = RunCounters()
        self.last_rollout: list[dict] = []        # this process's rows of the latest rollout (the completions table)
        self.rollout_rows_kept: int | None = None  # how many of them (None: 4 groups; CLI runs: tracking.samples)
        self._scored: ScoredRound | None = None   # the latest round's rewards and rows
        self._entropy_in_loss = False
        self._window, self._step_entropy = WindowStats(), WindowStats()   # loss-side curves (loss_stats.py)
        super().__init__(model, funcs, args, train_dataset, *trl_args, **trl_kwargs)
        self.prompt_draws = PromptDraws(self.args.seed, self.accelerator.process_index)
        if late:
            first = len(self.reward_funcs)
            for func in late:
                self.reward_funcs.append(func)
                self.reward_func_names.append(dropin.reward_func_names([func])[0])
                self.reward_processing_classes.append(None)
            added = torch.ones(len(late), device=self.reward_weights.device, dtype=self.reward_weights.dtype)
            self.reward_weights = torch.cat([self.reward_weights, added])
            self._own_reward_columns = list(range(first, len(self.reward_funcs)))
        # report_to="mlflow": the run named, its params trimmed and tagged as a CLI run's (mlflow_report.py)
        mlflow_report.report_like_the_cli(self, self._describe_run, dropin.mlflow_tags(self.method_name, spec,
                                                                                       self.args.seed))
        self.critic = None
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
        """TRL's rewards, plus one RolloutRow per completion, gathered over processes in rank
        order like the rewards (``self._scored``)."""
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._warn_unscorable(rewards, prompts, completions)
        correct = self._local_correctness(inputs, prompts, completions, completion_ids_list)
        local = [   # environment datasets may have no prompt column: TRL's own prompt (reset() supplies it)
            RolloutRow(ok, len(ids), (not ids) or ids[-1] not in self.eos_token_ids, x.get("prompt", p), c)
            for ok, x, p, c, ids in zip(correct, inputs, prompts, completions, completion_ids_list)
        ]
        rows = gather_object(local) if self.accelerator.num_processes > 1 else local
        if self._correct_kind in ("reward", "none"):   # decided on the gathered rewards
            rows = [r._replace(correct=ok) for ok, r in zip(self._correct_from_rewards(rewards), rows)]
        self._scored = ScoredRound(rewards, rows)
        return rewards

    def _score_greedy(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards for ReMax's greedy completions (``EstimatorInputs``), recording no rollout
        rows, and nothing in TRL's logs or a task's reward counters (``_outside_the_rollout``)."""
        with self._outside_the_rollout():
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    # -- advantages ---------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        sampling = SAMPLING_MODES[self.spec.sampling]   # method/sampling_modes.py
        if sampling.regenerates:
            batch = self._dynamic_sampling(inputs)
            out, rewards_k, rows, generated = batch.local, batch.rewards, batch.rows, batch.generated
        else:
            out = self._trl_round(inputs)
            rewards_k, rows = self._scored.rewards, self._scored.rows
            self._entropy_in_loss = self._loss_sees_pi_old_on_every_token(out)
            generated = Generated(rewards_k, rows, None if self._entropy_in_loss else self._entropy_sums(out))
            if sampling.drops_flat_groups:
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
        if sampling.retains:
            kept = self._gfpo(out, rewards_adj, start)
            rewards_adj, retained = kept.rewards, kept.retained
        reduce = (lambda t: self.accelerator.reduce(t, reduction="sum")) if self.accelerator.num_processes > 1 else None
        generated_tokens = generated_mask(out, rows, start)   # model tokens, before any filter's masking
        # the optimal token baselines are over every generated model token (truncated rows included), as verl's;
        # the loss applies the trained mask
        baseline_mask = generated_tokens.float() if ADVANTAGES[self.spec.advantage].sum_pi_squared else mask
        extra = self._estimator_extras(inputs, out, baseline_mask)
        if self.critic is not None:
            out["old_values"] = self._critic_values(out, grad=False)
            advantages, out["returns"] = algorithms.gae_advantages(
                self.spec, rewards_adj[start:start + n_local], out["old_values"], mask, penalty, reduce=reduce)
        else:
            advantages = algorithms.compute_advantages(
                self.spec, rewards_adj, G, mask=baseline_mask, token_penalty=penalty,
                prompt_keys=[r.prompt for r in rows], tracker=self.tracker, local_rows=slice(start, start + n_local),
                reduce=reduce, lengths=self._gather(generated_tokens.sum(1)), **extra)
        if self.tracker is not None:
            self._metrics["train"]["tracker/prompts"].append(float(len(self.tracker.state)))
        if advantages.dim() == 1:
            advantages = advantages[start:start + n_local]
        if hasattr(self.rollout_func, "finish"):   # multi-turn episodes: their curves; GiGPO's per-token term (envs/)
            advantages, episode_stats = self.rollout_func.finish(self.spec, advantages, out["completion_ids"].size(1))
            for key, value in episode_stats.items():
                self._metrics["train"][key].append(value)
        out["advantages"] = advantages.to(device)
        kept = 4 * G if self.rollout_rows_kept is None else self.rollout_rows_kept
        self.last_rollout = completion_rows(rows, rewards_k, self.reward_func_names, total, advantages, mask, start, G, kept)
        out["group_ids"] = (torch.arange(total.numel(), device=device) // G)[start:start + n_local]
        out["seq_rewards"] = total[start:start + n_local]
        out["correct"] = correct_of(rows).to(device)[start:start + n_local]
        trained_rows = self._gather((out["completion_mask"].sum(1) > 0).float()).bool().cpu()
        self._record_rollout(total, rows, trained_rows, generated, G, retained)
        in_baseline = total if retained is None else total.masked_fill(~retained.to(total.device), float("nan"))
        self._check_update_signal(out, in_baseline, rows, trained_rows, generated, G)
        return out

    @property
    def _kl_in_reward(self) -> bool:
        return kl_in_reward(self.spec)

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

    def _record_rollout(self, total: torch.Tensor, rows: list[RolloutRow], trained_rows: torch.Tensor,
                        generated: Generated, G: int, retained: torch.Tensor | None = None) -> None:
        """Curves once per generation batch, in two populations: unprefixed over every completion
        generated for it (all dynamic-sampling rounds, before any filter), ``trained/`` over the
        rows the update uses (``metrics.trained_metrics``)."""
        gen_rows = generated.rows
        gen_total = algorithms.combine_rewards(generated.rewards, self.spec.reward_weights)
        stats = rollout_metrics(gen_total.float().cpu(), correct_of(gen_rows), lengths_of(gen_rows),
                                truncated_of(gen_rows), G,
                                overlong=(self.max_completion_length, self.spec.overlong_buffer))
        stats.update(trained_metrics(total.float().cpu(), correct_of(rows), lengths_of(rows), trained_rows, G, retained))
        if self._correct_kind == "none":   # "correct" was the stand-in: the names say so
            stats = dropin.rename_for_proxy(stats)
        ent = generated.entropy   # None: the loss logs it (_loss_sees_pi_old_on_every_token)
        if ent is not None and self.accelerator.num_processes > 1:
            ent = self.accelerator.reduce(ent.to(self.accelerator.device), reduction="sum").cpu()
        if ent is not None and ent[1] > 0:
            stats["entropy"] = float(ent[0] / ent[1])
        self.counters.cumulative_tokens += stats["tokens/generated"]
        stats["tokens/cumulative"] = self.counters.cumulative_tokens
        stats["override/advantage"] = 1.0
        for key, value in stats.items():
            self._metrics["train"][key].append(value)

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
        if self.off_policy_mask_threshold is not None:   # TRL's own off-policy sequence mask (trl_fields.TRL_FIELDS)
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
            entropies=entropies, entropy_coef=self.entropy_control.applied(), rewards=inputs.get("seq_rewards"),
            group_ids=inputs.get("group_ids"), gather=self._gather_valid if self.accelerator.num_processes > 1 else None,
            positive=inputs.get("correct"),
            sampling_weights=inputs.get("importance_sampling_ratio"),  # TRL's vLLM correction (engines.py)
            keep=keep,
        )
        trl_stats = {k: stats.pop(k) for k in list(stats) if k in trl_loss_keys()}
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
                if self.critic.micro_steps <= self.spec.critic_warmup * self.current_gradient_accumulation_steps:
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
        """TRL's own loss-side curves (``metric_catalog.trl_loss_keys``, ``aux_loss``) under TRL's names,
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
            coef = self.entropy_control.coef
            if not ENTROPY_MODES[self.spec.entropy_mode].adaptive and coef:   # as TRL logs a static bonus
                self._metrics["train"]["entropy_coef"].append(coef)
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

    def _update_entropy_coef(self, entropy: float | None) -> None:
        """``EntropyController.update`` once per optimizer step (at the accumulation boundary), from
        the entropy of the step's trained tokens over every process."""
        if not self.entropy_control.update(entropy):
            return
        # TRL's attributes, as TRL's controller keeps them: its checkpoint (entropy_ctrl_state.json) saves these
        self.entropy_coef, self._last_world_entropy = self.entropy_control.coef, entropy
        self._metrics["train"]["entropy_coef"].append(self.entropy_control.coef)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """TRL restores its adaptive entropy controller from the checkpoint here (``entropy_coef``,
        ``_last_world_entropy``); grpolab's controller continues from the same state, so a resumed
        run trains as stock TRL's does."""
        super()._load_optimizer_and_scheduler(checkpoint)
        restored = checkpoint is not None and os.path.exists(os.path.join(checkpoint, "entropy_ctrl_state.json"))
        if ENTROPY_MODES[self.spec.entropy_mode].gated and getattr(self, "use_adaptive_entropy", False) and restored:
            self.entropy_control.load_state_dict({"coef": self.entropy_coef, "last_entropy": self._last_world_entropy})

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


GrpoLabTrainer.__init__.__signature__ = dropin.dropin_signature(GRPOTrainer.__init__)   # TRL's names, not *args
