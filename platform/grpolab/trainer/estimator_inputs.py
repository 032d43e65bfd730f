"""Inputs some advantage estimators need beyond the rewards, computed only where the estimator's
entry asks for them (``grpolab.method.advantages``): ReMax's greedy baseline (``greedy_baseline``)
and the optimal token baselines' vocabulary sum of pi_old^2 (``sum_pi_squared``). A mixin of
``GrpoLabTrainer``; the rewards of the greedy completions come from its ``_score_greedy``, which
runs TRL's own reward computation.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import NamedTuple

import torch

from grpolab import algorithms
from grpolab.method.advantages import ADVANTAGES

#: the generation settings that sample (``transformers.GenerationConfig``); greedy decoding leaves them unset
SAMPLING_SETTINGS = ("temperature", "top_p", "top_k", "min_p", "top_h", "typical_p", "epsilon_cutoff", "eta_cutoff")


class PolicyTokenStats(NamedTuple):
    """Per completion token (n_local, T), under pi_old: the training model's policy when the batch was
    generated (with vLLM, not the sampler's own probabilities)."""
    logp: torch.Tensor             # log pi_old(y_t)
    sum_pi_squared: torch.Tensor   # sum_v pi_old(v | context)^2


def check_whole_groups(advantage: str, args) -> None:
    """The estimators whose entry asks for a greedy baseline or sum_pi_squared compute them over each
    group on the process that holds it, so every process's rows of a generation batch
    (per_device_train_batch_size x steps_per_generation, groups contiguous) must be whole groups."""
    entry = ADVANTAGES[advantage]
    if not (entry.greedy_baseline or entry.sum_pi_squared):
        return
    rows = args.per_device_train_batch_size * args.steps_per_generation
    if rows % args.num_generations:
        raise ValueError(f"advantage={advantage} needs whole groups on each process: per_device_train_batch_size "
                         f"({args.per_device_train_batch_size}) x steps_per_generation ({args.steps_per_generation}) "
                         f"= {rows} rows per process, not a multiple of num_generations ({args.num_generations})")


def _until_end(ids: list[int], ends: list[int]) -> list[int]:
    """A generated id list cut after its first end token (TRL's completions end there)."""
    cut = next((i for i, t in enumerate(ids) if t in ends), None)
    return ids if cut is None else ids[: cut + 1]


class EstimatorInputs:
    """ReMax's greedy baseline and the optimal token baselines' vocabulary statistics."""

    def _estimator_extras(self, inputs: list[dict], out: dict, mask: torch.Tensor) -> dict:
        """The ``compute_advantages`` keywords the run's estimator entry asks for (none for most);
        ``mask`` (n_local, T): the model tokens the estimator's baselines are over."""
        entry, extra = ADVANTAGES[self.spec.advantage], {}
        if entry.greedy_baseline:
            extra["greedy_rewards"] = self._greedy_baseline(inputs, out)
        if entry.sum_pi_squared:
            stats = self._policy_token_stats(out)
            self._log_sum_pi_squared(stats, mask)
            extra.update(old_logp=stats.logp, sum_pi_squared=stats.sum_pi_squared)
        return extra

    #: rows per forward in ``_policy_token_stats``: its softmax holds rows x T x V floats at once
    TOKEN_STATS_ROWS = 4

    @torch.no_grad()
    def _policy_token_stats(self, out: dict) -> PolicyTokenStats:
        """log pi_old(y_t) and sum_v pi_old(v)^2 at every completion token of this process's rows,
        from one no-grad forward of the current policy (pi_old at generation time), logits divided
        by the sampling temperature as TRL's log-probs are. Cost: a forward pass plus a softmax over
        the vocabulary at every completion position, O(rows x T x V); at a real vocabulary
        (V ~ 150k, T = 1024) that is ~0.6 GB of fp32 logits per row, so rows go through in chunks of
        ``TOKEN_STATS_ROWS`` and only the estimators whose entry says ``sum_pi_squared`` pay for it."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        attend = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        T = out["completion_ids"].size(1)
        logps, squares = [], []
        for s in range(0, ids.size(0), self.TOKEN_STATS_ROWS):
            e = s + self.TOKEN_STATS_ROWS
            logits = self.model(input_ids=ids[s:e], attention_mask=attend[s:e]).logits[:, -T - 1:-1, :]
            log_pi = (logits.float() / self.temperature).log_softmax(-1)
            logps.append(log_pi.gather(-1, out["completion_ids"][s:e].unsqueeze(-1)).squeeze(-1))
            squares.append((2 * log_pi).exp().sum(-1))
        return PolicyTokenStats(torch.cat(logps), torch.cat(squares))

    def _log_sum_pi_squared(self, stats: PolicyTokenStats, mask: torch.Tensor) -> None:
        """``otb/sum_pi_squared_mean``: the mean over the tokens of ``mask`` (every model token
        generated for the update batch), all processes."""
        pair = torch.stack([(stats.sum_pi_squared * mask).sum(), mask.sum()]).double()
        if self.accelerator.num_processes > 1:
            pair = self.accelerator.reduce(pair, reduction="sum")
        if pair[1] > 0:
            self._metrics["train"]["otb/sum_pi_squared_mean"].append(float(pair[0] / pair[1]))

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

    def _greedy_generation_kwargs(self) -> dict:
        """TRL's generation settings (its end tokens ``eos_token_ids``, repetition penalty,
        ``GRPOConfig.generation_kwargs``, ...) with the sampling ones unset: the policy's argmax.
        With vLLM, TRL's generation_kwargs are vLLM sampling parameters, so only the settings that
        transformers shares with them are kept (the greedy completion is generated by transformers)."""
        kwargs = getattr(self, "generation_kwargs", None)   # TRL sets it only when transformers generates
        if kwargs is None:
            tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)   # a processor's own
            kwargs = {"max_new_tokens": self.max_completion_length, "pad_token_id": tokenizer.pad_token_id,
                      "bos_token_id": tokenizer.bos_token_id, "eos_token_id": self.eos_token_ids,
                      "repetition_penalty": self.repetition_penalty}
        return {**kwargs, **dict.fromkeys(SAMPLING_SETTINGS), "do_sample": False}

    @torch.no_grad()
    def _greedy_baseline(self, inputs: list[dict], out: dict) -> torch.Tensor:
        """(N,) for the whole batch: the total reward (the method's reward weights) of one greedy
        completion of each row's prompt, generated by the current policy from the prompt ids TRL
        sampled from, with TRL's generation settings less the sampling ones (up to
        ``max_completion_length`` tokens, ending at any of TRL's end tokens) and scored by the run's
        reward functions, so A_i = R_i - R_greedy(prompt) is ReMax's. Groups are whole on each
        process (``check_whole_groups``: one prompt per G contiguous rows)."""
        from transformers import GenerationConfig
        G, n_local = self.num_generations, out["prompt_ids"].size(0)
        firsts = list(range(0, n_local, G))
        prompt_ids, prompt_mask = out["prompt_ids"][firsts], out["prompt_mask"][firsts]
        config = GenerationConfig(**self._greedy_generation_kwargs(), disable_compile=True)
        model = self.accelerator.unwrap_model(self.model)
        training = model.training
        model.eval()   # greedy means the policy's argmax: no dropout noise
        try:
            generated = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
        finally:
            model.train(training)
        ids = [_until_end(row, self.eos_token_ids) for row in generated[:, prompt_ids.size(1):].tolist()]
        texts = self.processing_class.batch_decode(ids, skip_special_tokens=True)
        prompted = [inputs[i] for i in firsts]
        prompts = [x["prompt"] for x in prompted]
        conversational = isinstance(prompts[0], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
        rewards = self._score_greedy(prompted, prompts, completions, ids)   # (prompts of every process, K)
        greedy = algorithms.combine_rewards(rewards, self.spec.reward_weights)
        if torch.isnan(greedy).any():
            raise ValueError(f"advantage={self.spec.advantage}: every reward function returned None for a greedy "
                             "completion, so its prompt has no baseline")
        self._metrics["train"]["remax/greedy_reward_mean"].append(float(greedy.mean()))
        return greedy.repeat_interleave(G)
