"""Sampling and pass@k scoring shared by the warm start and the held-out evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from grpolab.world.task import Example, Task


@dataclass
class EvalResult:
    pass_at_1: float          # mean correctness over all k samples of all prompts (unbiased pass@1)
    pass_at_k: float          # fraction of prompts with at least one correct sample among k
    greedy_accuracy: float    # fraction of prompts whose greedy completion is correct
    mean_length: float        # mean sampled completion length in tokens
    samples: list[dict]       # a few (prompt, completion, correct) rows for inspection
    salvage_rate: float = math.nan   # with salvage: truncated samples correct once continued to twice the cap
    truncated: int = 0               # with salvage: sampled completions that reached the cap
    curve_pass_at_1: float = math.nan   # with curve_prompts: pass@1 over the first curve_prompts prompts only


@dataclass(frozen=True)
class EvalOptions:
    """How a held-out evaluation samples and what it measures besides pass@1 / pass@k."""
    k: int                              # samples per prompt
    temperature: float = 1.0
    batch_prompts: int = 64             # prompts per generate call
    keep_samples: int = 8               # (prompt, completion, correct) rows kept for inspection
    max_new_tokens: int | None = None   # completion cap; None: the task's own limit
    salvage: bool = False               # also the salvage rate (``salvaged``)
    curve_prompts: int = 0              # P > 0: also pass@1 over the first P prompts only


class Decoding(NamedTuple):
    """How ``generate`` draws: n samples per prompt, or one greedy completion."""
    n: int
    max_new_tokens: int
    temperature: float = 1.0
    greedy: bool = False
    top_p: float = 1.0


def sample(model, tokenizer, prompts: list[str], n: int, max_new_tokens: int,
           temperature: float = 1.0, top_p: float = 1.0) -> tuple[list[str], list[int]]:
    """n completions per prompt (prompt-major order) and their token lengths (EOS counted);
    ``top_p`` < 1 samples from the nucleus (named benchmarks' decoding)."""
    return generate(model, tokenizer, prompts, Decoding(n, max_new_tokens, temperature, top_p=top_p))


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], decoding: Decoding) -> tuple[list[str], list[int]]:
    """Completions per prompt (prompt-major order) as ``decoding`` says and their token lengths
    (EOS counted); greedy draws one per prompt whatever ``decoding.n``."""
    greedy, top_p, temperature = decoding.greedy, decoding.top_p, decoding.temperature
    was_training = model.training
    model.eval()
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    batch = {k: v.to(model.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    out = model.generate(
        **batch, do_sample=not greedy, temperature=temperature if not greedy else None,
        top_k=0 if not greedy else None, top_p=top_p if not greedy and top_p < 1 else None,
        max_new_tokens=decoding.max_new_tokens,
        num_return_sequences=1 if greedy else decoding.n, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model.train(was_training)
    return decode_completions(tokenizer, out[:, batch["input_ids"].shape[1]:].tolist())


def decode_completions(tokenizer, rows: list[list[int]]) -> tuple[list[str], list[int]]:
    """Completion token rows -> texts and lengths: each row is cut after its first EOS (counted),
    so padding (transformers) and an engine's own stop handling (vLLM) measure the same."""
    texts, lengths = [], []
    for row in rows:
        row = list(row)
        length = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        lengths.append(length)
        texts.append(tokenizer.decode(row[:length], skip_special_tokens=True))
    return texts, lengths


def evaluate(model, tokenizer, task: Task, examples: list[Example], options: EvalOptions,
             sampler=None) -> EvalResult:
    """pass@1, pass@k, greedy accuracy and mean length on ``examples``, sampled as ``options`` says.
    ``max_new_tokens`` is the completion cap; a trained run passes its own training cap so that it is judged on completions
    of the length it learned to produce (default: the task's own limit, e.g. for the warm start).
    ``sampler(prompts, n, max_new_tokens, temperature, greedy=False) -> (texts, lengths)`` draws
    the completions (default: transformers ``generate`` on ``model``; vllm_eval.py: the vLLM
    engine training samples with). ``salvage``: also the salvage rate (``salvaged``).
    ``curve_prompts`` P > 0: also pass@1 over the first P examples only, sum_{p<P} c_p / (P k), the
    value on the prompts the evaluations before the final one score (``curve_pass_at_1``)."""
    k, temperature, keep_samples = options.k, options.temperature, options.keep_samples
    if hasattr(task, "evaluate"):   # multi-turn tasks run whole episodes (grpolab.envs)
        if sampler is not None:
            raise NotImplementedError(f"held-out episodes of task {task.name!r} run with transformers only, not vLLM")
        if options.salvage:
            raise NotImplementedError(f"eval.salvage: task {task.name!r} runs multi-turn episodes, which have no "
                                      "single completion to continue; set eval.salvage: false")
        return task.evaluate(model, tokenizer, examples, k, temperature, keep_samples)
    cap = options.max_new_tokens or task.max_completion_length
    if sampler is None:
        def sampler(prompts, n, max_new, temp=1.0, greedy=False):
            return generate(model, tokenizer, prompts, Decoding(n, max_new, temp, greedy))
    correct_counts, lengths, greedy_hits, samples, cut, saved = [], [], 0, [], 0, 0
    for start in range(0, len(examples), options.batch_prompts):
        chunk = examples[start:start + options.batch_prompts]
        prompts = [e.prompt for e in chunk]
        texts, lens = sampler(prompts, k, cap, temperature)
        lengths.extend(lens)
        if options.salvage:
            with _kept_rng(model):
                n_cut, n_saved = salvaged(sampler, task, [e for e in chunk for _ in range(k)], texts, lens, cap,
                                          temperature)
            cut, saved = cut + n_cut, saved + n_saved
        for i, ex in enumerate(chunk):
            hits = [task.is_correct(ex, t) for t in texts[i * k:(i + 1) * k]]
            correct_counts.append(sum(hits))
            if len(samples) < keep_samples:
                samples.append({"prompt": ex.prompt, "answer": ex.answer, "completion": texts[i * k], "correct": hits[0],
                                "index": start + i, "length": lens[i * k]})
        greedy_texts, _ = sampler(prompts, 1, cap, greedy=True)
        greedy_hits += sum(task.is_correct(ex, t) for ex, t in zip(chunk, greedy_texts))
    n = max(len(examples), 1)
    curve = correct_counts[:options.curve_prompts]
    return EvalResult(
        pass_at_1=sum(correct_counts) / (n * k), pass_at_k=sum(c > 0 for c in correct_counts) / n,
        greedy_accuracy=greedy_hits / n, mean_length=sum(lengths) / max(len(lengths), 1), samples=samples,
        salvage_rate=saved / cut if cut else math.nan, truncated=cut,
        curve_pass_at_1=sum(curve) / (len(curve) * k) if curve else math.nan,
    )


def _kept_rng(model):
    """The torch generators saved and restored around the salvage continuations, so that measuring
    salvage moves no draw of the evaluation's later prompts nor of training: a row with
    eval.salvage on trains exactly as one without. Only the sampling model's own CUDA device is
    forked (the rule of tasks.benchmarks.rng_devices); an engine with its own generator (vLLM) is
    not covered."""
    params = getattr(model, "parameters", None)
    device = next(params()).device if callable(params) else None   # no model (an engine): no CUDA generator to fork
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device is not None and device.type == "cuda" else []
    return torch.random.fork_rng(devices=cuda)


def salvaged(sampler, task: Task, examples: list[Example], texts: list[str], lengths: list[int], cap: int,
             temperature: float) -> tuple[int, int]:
    """(truncated, salvaged): of the completions that reached the cap (``lengths`` >= cap; one whose
    EOS is exactly the cap-th token counts too), how many end correct when sampling continues from
    their prefix (prompt + completion) for another ``cap`` tokens, twice the cap in all: whether
    truncation cut answers that were on their way to being right (DAPO's premise for overlong
    filtering) or only answers that were wrong anyway."""
    cut = [i for i, n in enumerate(lengths) if n >= cap]
    if not cut:
        return 0, 0
    more, _ = sampler([examples[i].prompt + texts[i] for i in cut], 1, cap, temperature)
    return len(cut), sum(task.is_correct(examples[i], texts[i] + m) for i, m in zip(cut, more))
