"""Inputs some advantage estimators need beyond the rewards, computed only where the estimator's
entry names them (``Estimator.inputs``, ``grpolab.method.advantages``), each by its provider in
``PROVIDERS``: ReMax's greedy baseline (``greedy_rewards``), the optimal token baselines' log
pi_old and vocabulary sum of pi_old^2 (``pi_old_token_stats``) and the critic's values at
generation (``critic_values``, GAE's). A new input is one ``register_provider`` call: the trainer
asks the registry, never an estimator's name. A rollout_func may supply inputs of its own (the
multi-turn episodes: ``advantage_inputs``), asked for by that method alone, never by its type.
A part of ``GrpoLabTrainer``; the rewards of the greedy completions come from the scorer it is
given (the trainer's, which runs TRL's own reward computation outside the rollout's logs).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from grpolab import algorithms
from grpolab.method.advantages import ADVANTAGES, input_keys

#: the generation settings that sample (``transformers.GenerationConfig``); greedy decoding leaves them unset
SAMPLING_SETTINGS = ("temperature", "top_p", "top_k", "min_p", "top_h", "typical_p", "epsilon_cutoff", "eta_cutoff")


class PolicyTokenStats(NamedTuple):
    """Per completion token (n_local, T), under pi_old: the training model's policy when the batch was
    generated (with vLLM, not the sampler's own probabilities)."""
    logp: torch.Tensor             # log pi_old(y_t)
    sum_pi_squared: torch.Tensor   # sum_v pi_old(v | context)^2


class ProviderCall(NamedTuple):
    """What a provider reads: the batch's input rows, TRL's generation output ``out`` (this
    process's rows) and ``mask`` (n_local, T), the model tokens the estimator's baselines are over.
    A provider returns this process's rows (n_local first); an estimator reading them alongside the
    gathered rewards takes ``AdvantageInputs.local_rows`` of those (and its provider says
    ``whole_groups`` when it needs each group on one process)."""
    inputs: list[dict]
    out: dict
    mask: torch.Tensor


class Provider(NamedTuple):
    """``fn(part, call) -> {key: tensor}``, keyed as ``AdvantageInputs.of`` reads them, by the keys its
    input declares (``method.advantages.input_keys``: ``AdvantageInputs`` fields, or names that
    reach the estimator in ``provided``), where ``part`` is the trainer's ``EstimatorInputs`` (its
    public trainer, scorer and statistics); ``whole_groups``: it computes
    over each group on the process that holds it, so each process's rows must be whole groups."""
    fn: Callable[["EstimatorInputs", ProviderCall], dict]
    whole_groups: bool = False


PROVIDERS: dict[str, Provider] = {}


def register_provider(name: str, provider: Provider) -> None:
    """Add the provider of the estimator input ``name`` (an ``Estimator.inputs`` name)."""
    if name in PROVIDERS:
        raise ValueError(f"estimator input {name!r} has a provider already")
    PROVIDERS[name] = provider


def providers_of(advantage: str) -> list[Provider]:
    """The providers of the inputs the estimator's entry names; one without a provider is refused."""
    missing = [name for name in ADVANTAGES[advantage].inputs if name not in PROVIDERS]
    if missing:
        raise ValueError(f"advantage={advantage} reads {missing[0]!r}, which no provider supplies; provided: "
                         f"{', '.join(sorted(PROVIDERS)) or 'none'} (trainer/estimator_inputs.register_provider)")
    return [PROVIDERS[name] for name in ADVANTAGES[advantage].inputs]


def needs_whole_groups(advantage: str) -> bool:
    return any(p.whole_groups for p in providers_of(advantage))


def check_whole_groups(advantage: str, args) -> None:
    """The estimators with an input computed over each group on the process that holds it (a
    greedy baseline, sum_pi_squared) need every process's rows of a generation batch
    (per_device_train_batch_size x steps_per_generation, groups contiguous) to be whole groups."""
    if not needs_whole_groups(advantage):
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
    """ReMax's greedy baseline, the optimal token baselines' vocabulary statistics and the critic's
    values of a ``GrpoLabTrainer`` (its public model, critic, settings, rollout_func and
    ``record_curve``); ``score_greedy(inputs, prompts, completions, completion_ids) -> (N, K)``
    scores the greedy completions."""

    def __init__(self, trainer, score_greedy):
        self.trainer, self.score_greedy = trainer, score_greedy

    def extras(self, inputs: list[dict], out: dict, mask: torch.Tensor) -> dict:
        """The inputs by name (``AdvantageInputs.of``) that the run's estimator entry asks for (none
        for most), and those its rollout_func supplies: one with an ``advantage_inputs(spec, width,
        record_curve)`` method returns them for the batch it generated, ``width`` its completions'
        tokens (multi-turn episodes: GiGPO's, whatever the estimator), and records its own curves.
        ``mask`` (n_local, T): the model tokens the estimator's baselines are over."""
        trainer, extra, call = self.trainer, {}, ProviderCall(inputs, out, mask)
        advantage = trainer.spec.advantage
        for name, provider in zip(ADVANTAGES[advantage].inputs, providers_of(advantage)):
            given = provider.fn(self, call)
            undeclared = sorted(set(given) - set(input_keys(name)))
            if undeclared:   # compute_advantages would refuse it as unread: name the provider instead
                raise ValueError(f"the provider of estimator input {name!r} returned {undeclared[0]!r}, which it does "
                                 f"not declare (method.advantages.input_keys: {', '.join(input_keys(name))})")
            extra.update(given)
        supply = getattr(trainer.rollout_func, "advantage_inputs", None)
        if supply is not None:
            extra.update(supply(trainer.spec, out["completion_ids"].size(1), trainer.record_curve))
        return extra

    def greedy_rewards(self, call: ProviderCall) -> dict:
        return {"greedy_rewards": self._greedy_baseline(call.inputs, call.out)}

    def critic_values(self, call: ProviderCall) -> dict:
        """V(s_t) (n_local, T) of this process's rows from the critic as it is at generation, no grad:
        GAE's baselines, and the centre of the value loss's clipping (``BatchExtras.old_values``)."""
        return {"old_values": self.trainer.critic.values(call.out, grad=False)}

    def pi_old_token_stats(self, call: ProviderCall) -> dict:
        stats = self.policy_token_stats(call.out)
        self._log_sum_pi_squared(stats, call.mask)
        return {"old_logp": stats.logp, "sum_pi_squared": stats.sum_pi_squared}

    #: rows per forward in ``policy_token_stats``: its softmax holds rows x T x V floats at once
    TOKEN_STATS_ROWS = 4

    @torch.no_grad()
    def policy_token_stats(self, out: dict) -> PolicyTokenStats:
        """log pi_old(y_t) and sum_v pi_old(v)^2 at every completion token of this process's rows,
        from one no-grad forward of the current policy (pi_old at generation time), logits divided
        by the sampling temperature as TRL's log-probs are. Cost: a forward pass plus a softmax over
        the vocabulary at every completion position, O(rows x T x V); at a real vocabulary
        (V ~ 150k, T = 1024) that is ~0.6 GB of fp32 logits per row, so rows go through in chunks of
        ``TOKEN_STATS_ROWS`` and only the estimators whose entry reads ``pi_old_token_stats`` pay for it."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        attend = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        T, model, temperature = out["completion_ids"].size(1), self.trainer.model, self.trainer.temperature
        logps, squares = [], []
        for s in range(0, ids.size(0), self.TOKEN_STATS_ROWS):
            e = s + self.TOKEN_STATS_ROWS
            logits = model(input_ids=ids[s:e], attention_mask=attend[s:e]).logits[:, -T - 1:-1, :]
            log_pi = (logits.float() / temperature).log_softmax(-1)
            logps.append(log_pi.gather(-1, out["completion_ids"][s:e].unsqueeze(-1)).squeeze(-1))
            squares.append((2 * log_pi).exp().sum(-1))
        return PolicyTokenStats(torch.cat(logps), torch.cat(squares))

    def _log_sum_pi_squared(self, stats: PolicyTokenStats, mask: torch.Tensor) -> None:
        """``otb/sum_pi_squared_mean``: the mean over the tokens of ``mask`` (every model token
        generated for the update batch), all processes."""
        pair = torch.stack([(stats.sum_pi_squared * mask).sum(), mask.sum()]).double()
        accelerator = self.trainer.accelerator
        if accelerator.num_processes > 1:
            pair = accelerator.reduce(pair, reduction="sum")
        if pair[1] > 0:
            self.trainer.record_curve("otb/sum_pi_squared_mean", float(pair[0] / pair[1]))

    def _greedy_generation_kwargs(self) -> dict:
        """TRL's generation settings (its end tokens ``eos_token_ids``, repetition penalty,
        ``GRPOConfig.generation_kwargs``, ...) with the sampling ones unset: the policy's argmax.
        With vLLM, TRL's generation_kwargs are vLLM sampling parameters, so only the settings that
        transformers shares with them are kept (the greedy completion is generated by transformers)."""
        trainer = self.trainer
        kwargs = getattr(trainer, "generation_kwargs", None)   # TRL sets it only when transformers generates
        if kwargs is None:
            tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)   # a processor's own
            kwargs = {"max_new_tokens": trainer.max_completion_length, "pad_token_id": tokenizer.pad_token_id,
                      "bos_token_id": tokenizer.bos_token_id, "eos_token_id": trainer.eos_token_ids,
                      "repetition_penalty": trainer.repetition_penalty}
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
        trainer = self.trainer
        G, n_local, spec = trainer.num_generations, out["prompt_ids"].size(0), trainer.spec
        firsts = list(range(0, n_local, G))
        prompt_ids, prompt_mask = out["prompt_ids"][firsts], out["prompt_mask"][firsts]
        config = GenerationConfig(**self._greedy_generation_kwargs(), disable_compile=True)
        model = trainer.accelerator.unwrap_model(trainer.model)
        training = model.training
        model.eval()   # greedy means the policy's argmax: no dropout noise
        try:
            generated = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
        finally:
            model.train(training)
        ids = [_until_end(row, trainer.eos_token_ids) for row in generated[:, prompt_ids.size(1):].tolist()]
        texts = trainer.processing_class.batch_decode(ids, skip_special_tokens=True)
        prompted = [inputs[i] for i in firsts]
        prompts = [x["prompt"] for x in prompted]
        conversational = isinstance(prompts[0], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
        rewards = self.score_greedy(prompted, prompts, completions, ids)   # (prompts of every process, K)
        greedy = algorithms.combine_rewards(rewards, spec.reward_weights)
        if torch.isnan(greedy).any():
            raise ValueError(f"advantage={spec.advantage}: every reward function returned None for a greedy "
                             "completion, so its prompt has no baseline")
        trainer.record_curve("remax/greedy_reward_mean", float(greedy.mean()))
        return greedy.repeat_interleave(G)


# the critic's provider sits with the others, not in critic.py: the run's config checks look providers up
# (needs_whole_groups) before anything imports the value model
register_provider("critic_values", Provider(EstimatorInputs.critic_values))
register_provider("greedy_rewards", Provider(EstimatorInputs.greedy_rewards, whole_groups=True))
register_provider("pi_old_token_stats", Provider(EstimatorInputs.pi_old_token_stats, whole_groups=True))
