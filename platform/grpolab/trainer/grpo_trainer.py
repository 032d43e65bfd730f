"""The ONE module that touches TRL internals: a GRPOTrainer subclass running grpolab's axes.

Override points (TRL 1.16.0, pinned; tests/trainer/test_trl_contract.py fails loudly if they move):
- ``_calculate_rewards``: keep the gathered reward components, plus correctness and lengths.
- ``_generate_and_score_completions``: call TRL, then replace its advantages with
  ``grpolab.algorithms.compute_advantages`` and record the rollout curves.
- ``_compute_loss``: the per-token log-probs and entropies from TRL's patched forward, then
  ``grpolab.algorithms.policy_loss`` over one ``LossInputs`` record. Scaled for gradient accumulation here, because TRL sets
  ``loss_is_scaled_for_ga``.
Native TRL settings used where TRL is exact: ``mask_truncated_completions`` (overlong filter),
``num_iterations`` / ``steps_per_generation`` (rollout reuse), the reference model (beta != 0).
The trainer's parts, plain objects it builds and calls in order: the package docstring.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import defaultdict

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from grpolab import algorithms
from grpolab.algorithms import LossInputs
from grpolab.algorithms.kl import kl_estimate
from grpolab.errors import NonFiniteLossError
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.entropy_modes import ENTROPY_MODES
from grpolab.method.kl import kl_in_reward
from grpolab.method.sampling_modes import SAMPLING_MODES
from grpolab.tracking.metric_catalog import trl_loss_keys
from grpolab.trainer import dropin, loss_stats, mlflow_report, vllm_engine
from grpolab.trainer.batch_extras import BatchExtras
from grpolab.trainer.benchmark_eval import BenchmarkEvaluation, resolve_answer_extractor
from grpolab.trainer.correctness import Correctness, warn_unscorable
from grpolab.trainer.critic import Critic
from grpolab.trainer.empty_updates import EmptyUpdateChecks
from grpolab.trainer.entropy_control import EntropyController
from grpolab.trainer.estimator_inputs import EstimatorInputs, check_whole_groups
from grpolab.trainer.grpolab_state import GrpolabState
from grpolab.trainer.loss_curves import LossCurves
from grpolab.trainer.group_sampling import GroupSampling
from grpolab.trainer.pi_old_entropy import PiOldEntropy, TrlForward, loss_sees_pi_old_on_every_token
from grpolab.trainer.sampling import PromptDraws
from grpolab.trainer.step_times import RunCounters, StepTimes
from grpolab.trainer.rollouts import Generated, Round, RolloutRow, SampledBatch, ScoredRound
from grpolab.trainer.stages import Rollout, RolloutStages


class GrpoLabTrainer(GRPOTrainer):
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

    step_times: StepTimes | None = None   # built in __init__; TRL's own tests call _generate on a bare trainer

    def __init__(self, model, reward_funcs=None, args=None, train_dataset=None, *trl_args, **trl_kwargs):
        options = dropin.pop_options(trl_kwargs)   # method=, correctness=, max_empty_updates=, answer_extractor=
        self.max_empty_updates = options.max_empty_updates
        n_user = len(reward_funcs) if isinstance(reward_funcs, list) else int(reward_funcs is not None)
        setup = dropin.prepare(model, reward_funcs, args, train_dataset, options.method, options.correctness,
                               trl_kwargs)
        self.method_name, spec, args, funcs = setup.method_name, setup.spec, setup.args, setup.reward_funcs
        check_whole_groups(spec.advantage, args)
        funcs, late = dropin.hold_back_own_rewards(funcs, n_user, args, trl_kwargs)
        # the column of DAPO's ``overlong`` reward (None: none): TRL's all-None warning ignores it
        self._own_reward_columns = list(range(len(funcs) - (len(setup.reward_funcs) - n_user), len(funcs)))
        self.spec = spec
        self.correctness = Correctness(setup.correct_kind, setup.correct_key, spec.reward_weights)
        self.benchmark = BenchmarkEvaluation(self, self.correctness,
                                             *resolve_answer_extractor(options.answer_extractor, options.correctness))
        self.tracker = algorithms.ValueTracker(spec.tracker_decay) if ADVANTAGES[spec.advantage].tracker else None
        self.entropy_control = EntropyController(spec)
        self.counters = RunCounters()
        self.step_times, self.pi_old, self.empty_updates = StepTimes(self.counters), PiOldEntropy(), EmptyUpdateChecks(self)
        self.group_sampling, self.estimator_inputs = GroupSampling(self), EstimatorInputs(self, self._score_greedy)
        self.stages = RolloutStages(self)
        self.grpolab_state = GrpolabState(self)
        self.last_rollout: list[dict] = []        # this process's rows of the latest rollout (the completions table)
        self.rollout_rows_kept: int | None = None  # how many of them (None: 4 groups; CLI runs: tracking.samples)
        self._scored: ScoredRound | None = None   # the latest round's rewards and rows
        self._entropy_in_loss = False
        self.loss_curves = LossCurves(self)
        super().__init__(model, funcs, args, train_dataset, *trl_args, **trl_kwargs)
        self.prompt_draws = PromptDraws(self.args.seed, self.accelerator.process_index)
        if late:
            self._own_reward_columns = dropin.add_late_rewards(self, late)
        # report_to="mlflow": the run named, its params trimmed and tagged as a CLI run's (mlflow_report.py)
        mlflow_report.report_like_the_cli(self, lambda a, s: mlflow_report.describe_dropin_run(self, a, s),
                                          dropin.mlflow_tags(self.method_name, spec, self.args.seed))
        self.critic = Critic.of_policy(self.model, self.accelerator, spec.critic_lr) if ADVANTAGES[
            spec.advantage].critic else None

    def record_curve(self, key: str, value: float, mode: str = "train") -> None:
        """One value of a curve, averaged by TRL's ``log`` over its logging window (TRL's ``_metrics``)."""
        self._metrics[mode][key].append(value)

    # -- generation, rewards ----------------------------------------------------------------
    def _generate(self, prompts):
        """TRL's generation, timed (``StepTimes``)."""
        times = self.step_times
        with contextlib.nullcontext() if times is None else times.measure("generation", self.model.training):
            return super()._generate(prompts)

    def _trl_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        with self.step_times.measure("scoring", self.model.training):
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards, plus one RolloutRow per completion, gathered over processes in rank
        order like the rewards (``self._scored``)."""
        rewards = self._trl_rewards(inputs, prompts, completions, completion_ids_list)
        warn_unscorable(rewards, self._own_reward_columns, self.accelerator.process_index, prompts, completions)
        correct = self.correctness.local(inputs, prompts, completions, completion_ids_list, self.state)
        local = [   # environment datasets may have no prompt column: TRL's own prompt (reset() supplies it)
            RolloutRow(ok, len(ids), (not ids) or ids[-1] not in self.eos_token_ids, x.get("prompt", p), c)
            for ok, x, p, c, ids in zip(correct, inputs, prompts, completions, completion_ids_list)
        ]
        rows = gather_object(local) if self.accelerator.num_processes > 1 else local
        if self.correctness.kind in ("reward", "none"):   # decided on the gathered rewards
            G = self.num_generations if self.model.training else self.num_generations_eval
            rows = [r._replace(correct=ok) for ok, r in zip(self.correctness.from_rewards(rewards, G), rows)]
        self._scored = ScoredRound(rewards, rows)
        return rewards

    def _score_greedy(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards for ReMax's greedy completions (``EstimatorInputs``), recording no rollout
        rows, and nothing in TRL's logs or a task's reward counters (``_outside_the_rollout``)."""
        with self._outside_the_rollout():
            return self._trl_rewards(inputs, prompts, completions, completion_ids_list)

    @contextlib.contextmanager
    def _outside_the_rollout(self):
        """Reward scoring that is not a rollout's (the greedy completions): what reward functions
        log through TRL's ``log_extra`` / ``log_metric`` goes to throwaway buffers (TRL flushed the
        round's already; greedy rows would join the next round's completions table and curves), and
        the run counters of a task's reward functions (``reward_function.reward``: calls, failures)
        are left as they were."""
        counters = [(r, r.calls, r.failures) for r in (getattr(f, "reward", None) for f in self.reward_funcs)
                    if hasattr(r, "calls") and hasattr(r, "failures")]
        pending = self._pending_extra_logs, self._pending_metrics
        self._pending_extra_logs, self._pending_metrics = defaultdict(list), defaultdict(list)
        try:
            yield
        finally:
            self._pending_extra_logs, self._pending_metrics = pending
            for reward, calls, failures in counters:
                reward.calls, reward.failures = calls, failures

    # -- pi_old's entropy (PiOldEntropy) -----------------------------------------------------
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's forward; inside a generation round's old-log-prob pass it also keeps the entropies,
        which come from logits computed anyway (``PiOldEntropy``)."""
        pi_old = getattr(self, "pi_old", None)   # TRL's own tests call it on a trainer built without __init__
        if pi_old is None or not pi_old.wants(model is self.model, args, kwargs):
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                              *args, **kwargs)
        forward = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, **{**kwargs, "compute_entropy": True})
        return pi_old.keep(attention_mask[:, -logits_to_keep:], TrlForward(*forward))

    def _trl_round(self, inputs) -> dict:
        """TRL's generation and scoring of one round, keeping its old-log-prob pass's entropies."""
        self.pi_old.begin_round(self.args, self.num_iterations,
                                self.use_vllm and self.vllm_importance_sampling_correction)
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self.pi_old.capturing = False

    def _entropy_sums(self, out: dict) -> torch.Tensor:
        """pi_old's (entropy sum, tokens) over this round's generated tokens (``PiOldEntropy.entropy_sums``)."""
        return self.pi_old.entropy_sums(out, self._scored.rows, self.accelerator.process_index * len(out["completion_ids"]),
                                        self._get_per_token_logps_and_entropies, self.model)

    def _loss_sees_pi_old_on_every_token(self, out: dict) -> bool:
        return loss_sees_pi_old_on_every_token(self.spec, self.args, self.num_iterations, out)

    def _sampling_round(self, inputs) -> Round:
        out = self._trl_round(inputs)
        return Round(out, self._scored, self._entropy_sums(out))

    def _dynamic_sampling(self, inputs):
        return self.group_sampling.dynamic(inputs, self._sampling_round)

    # -- the generation batch: generate -> score -> select -> advantages -> metrics ----------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:   # evaluation: TRL's batch, and the loss's per-row inputs for every method
            out = super()._generate_and_score_completions(inputs)
            self.stages.record_evaluation(out, self._scored, self.num_generations_eval)
            return out
        batch = self._select(inputs)
        out = batch.local
        n_local = out["completion_ids"].size(0)
        mask = (out["completion_mask"] * out.get("tool_mask", 1)).float()   # model tokens (env tokens: tool_mask 0)
        penalty = self._token_kl_penalty(out, mask) if self._kl_in_reward else None
        rollout = Rollout(out, batch.rewards, batch.rows, batch.generated, self.accelerator.process_index * n_local,
                          self.num_generations, mask, penalty)
        self.stages.record(rollout, self.stages.advantages(rollout, inputs))
        return out

    def _select(self, inputs) -> SampledBatch:
        """TRL's generation and scoring, then the sampling axis (``GroupSampling``): dynamic
        sampling's rounds, or one round and the zero-variance filter."""
        sampling = SAMPLING_MODES[self.spec.sampling]   # method/sampling_modes.py
        if sampling.regenerates:
            return self._dynamic_sampling(inputs)
        out = self._trl_round(inputs)
        rewards_k, rows = self._scored.rewards, self._scored.rows
        self._entropy_in_loss = self._loss_sees_pi_old_on_every_token(out)
        generated = Generated(rewards_k, rows, None if self._entropy_in_loss else self._entropy_sums(out))
        if sampling.drops_flat_groups:
            self.group_sampling.filter_zero_variance(out, rewards_k, rows)
        return SampledBatch(out, rewards_k, rows, generated)

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
        extras, training = BatchExtras.of(inputs), self.model.training
        loss, stats = algorithms.policy_loss(self.spec, self._loss_inputs(inputs, logp, entropies, completion_mask, extras))
        trl_stats = {k: stats.pop(k) for k in list(stats) if k in trl_loss_keys()}
        if self.aux_loss_enabled:   # as TRL 1.16: + coef * aux_loss, scaled for gradient accumulation below
            loss = loss + self.router_aux_loss_coef * aux_loss
            trl_stats["aux_loss"] = float(aux_loss.detach())
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"non-finite loss {loss.item()} at step {self.state.global_step}")
        self.loss_curves.log_trl(trl_stats, "train" if training else "eval", float(completion_mask.sum()))
        stats["trained/entropy"] = stats.pop("entropy", float("nan"))
        if training and self._entropy_in_loss:   # the trained tokens are all generated tokens, under pi_old
            stats["entropy"] = stats["trained/entropy"]
        if training:
            loss = loss / self.current_gradient_accumulation_steps
            if self.critic is not None and self._train_critic(inputs, extras, stats):
                loss = loss * 0.0   # value pretraining: the policy waits until the critic has learned
            entropy = self.loss_curves.accumulate(stats, float(completion_mask.sum()))
            if self.accelerator.sync_gradients:   # the optimizer step's trained tokens are all in
                self._update_entropy_coef(entropy)
            if self._window_ends(self._step):
                self.loss_curves.log_window()
        else:
            self.loss_curves.log_eval(stats)
        self._metrics["train"]["override/loss"].append(1.0)
        return loss

    def _train_critic(self, inputs, extras: BatchExtras, stats: dict) -> bool:
        """The critic's micro-step on ``inputs`` toward GAE's value targets (``extras.returns``), its
        value loss into ``stats``; True while it warms up (``critic_warmup`` optimizer steps)."""
        if extras.returns is None:   # a batch the rollout stages did not fill (built by hand, or not a rollout's)
            raise RuntimeError("critic: the batch has no value targets (returns)")
        ga = self.current_gradient_accumulation_steps
        stats["critic/value_loss"] = self.critic.train_on(inputs, extras.returns, extras.old_values,
                                                          self.spec.value_clip, ga, self.args.max_grad_norm)
        warming = self.critic.micro_steps <= self.spec.critic_warmup * ga
        if warming:
            stats["critic/warmup"] = 1.0
        return warming

    def _loss_inputs(self, inputs, logp, entropies, completion_mask, extras: BatchExtras) -> LossInputs:
        """``policy_loss``'s record of one micro-batch: TRL's batch ``inputs``, the forward's log-probs
        and entropies, the trained tokens and grpolab's per-row ``extras``."""
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        keep = None
        if self.off_policy_mask_threshold is not None:   # TRL's own off-policy sequence mask (trl_fields.TRL_FIELDS)
            A = inputs["advantages"]
            keep = self.get_off_policy_mask(A.unsqueeze(1) if A.dim() == 1 else A, logp,
                                            inputs.get("sampling_per_token_logps", old), completion_mask,
                                            self.off_policy_mask_threshold)
        spg = self.args.steps_per_generation if self.model.training else 1
        gather = (lambda v: loss_stats.gather_valid(self.accelerator, v)) if self.accelerator.num_processes > 1 else None
        return LossInputs(
            logp, old, inputs["advantages"], completion_mask, inputs.get("ref_per_token_logps"),
            token_normaliser=inputs["num_items_in_batch"] / self.accelerator.num_processes / spg,
            max_completion_length=self.max_completion_length, entropies=entropies,
            entropy_coef=self.entropy_control.applied(), rewards=extras.rewards, group_ids=extras.group_ids,
            gather=gather, positive=extras.correct,
            sampling_weights=inputs.get("importance_sampling_ratio"),  # TRL's vLLM correction (engines.py)
            keep=keep)

    def _update_entropy_coef(self, entropy: float | None) -> None:
        """At an accumulation boundary: ``EntropyController.update`` from the entropy of the optimizer
        step's trained tokens over every process (None: none), and the coefficient's curve."""
        if self.entropy_control.update(entropy):
            # TRL's attributes, as TRL's controller keeps them: its checkpoint (entropy_ctrl_state.json) saves these
            self.entropy_coef, self._last_world_entropy = self.entropy_control.coef, entropy
            self.record_curve("entropy_coef", self.entropy_control.coef)
        elif not ENTROPY_MODES[self.spec.entropy_mode].adaptive and self.entropy_control.coef:   # as TRL logs a static bonus
            self.record_curve("entropy_coef", self.entropy_control.coef)

    def _window_ends(self, step: int) -> bool:
        """Whether micro-step ``step`` (TRL's ``_step``, from 0) is the last one over its generation
        batch, which serves steps_per_generation * num_iterations micro-steps: (step + 1) % that == 0.
        TRL's ``training_step`` increments ``_step`` after the step's loss, so ``_compute_loss`` reads
        the step's own index and ``training_step``, after TRL's, the index + 1."""
        return (step + 1) % (self.args.steps_per_generation * self.num_iterations) == 0

    def _load_optimizer_and_scheduler(self, checkpoint):
        """TRL restores its adaptive entropy controller from the checkpoint here (``entropy_coef``,
        ``_last_world_entropy``); grpolab's controller continues from the same state, so a resumed
        run trains as stock TRL's does."""
        super()._load_optimizer_and_scheduler(checkpoint)
        restored = checkpoint is not None and os.path.exists(os.path.join(checkpoint, "entropy_ctrl_state.json"))
        if ENTROPY_MODES[self.spec.entropy_mode].gated and getattr(self, "use_adaptive_entropy", False) and restored:
            self.entropy_control.load_state_dict({"coef": self.entropy_coef, "last_entropy": self._last_world_entropy})

    # -- the training window, evaluation, vLLM, checkpointed state ---------------------------
    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's step; the window's ``time/*`` curves where a generation batch ends (``StepTimes``)."""
        start = self.step_times.step_starts()
        output = super().training_step(model, inputs, num_items_in_batch)
        window_ends = self._window_ends(self._step - 1)   # TRL's training_step counted this step
        for key, value in self.step_times.step_ends(start, window_ends, self.accelerator).items():
            self._metrics["train"][key].append(value)
        return output

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        """transformers' evaluation plus the benchmark scores of the dataset it evaluated."""
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        scores = self.benchmark_scores(getattr(dataloader, "dataset", None))
        output.metrics.update({f"{metric_key_prefix}_{key}": value for key, value in scores.items()})
        return output

    def benchmark_scores(self, dataset) -> dict:
        """avg_at_n, pass_at_k, maj_at_n, sd_at_n and mean_length of ``dataset`` (``BenchmarkEvaluation``)."""
        return self.benchmark.scores(dataset)

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

    def vllm_completions(self, prompt_ids: list[list[int]], n: int, max_tokens: int, greedy: bool,
                         top_p: float | None = None, seed: int | None = None) -> list[list[int]]:
        """n completion token rows per prompt from TRL's vLLM engine (``vllm_engine.vllm_completions``)."""
        vllm = self.vllm_generation
        rows = vllm_engine.vllm_completions(vllm, prompt_ids, n, max_tokens, greedy, top_p, seed)
        if vllm.mode != "server" and vllm.enable_sleep_mode:   # TRL's flag: weights dropped, re-pushed before use
            vllm._llm_weights_sleeping = True
        return rows

    def grpolab_state_dict(self) -> dict:
        """The stateful parts' state by their names (``grpolab_state.PARTS``)."""
        return self.grpolab_state.state_dict()

    def load_grpolab_state_dict(self, state: dict) -> None:   # ``GrpolabState.load_state_dict``
        self.grpolab_state.load_state_dict(state)

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
