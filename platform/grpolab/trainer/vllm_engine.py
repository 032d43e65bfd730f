"""Held-out evaluation through TRL's vLLM engine (``experiment/vllm_eval.py``): the current
weights pushed once per step (``GrpoLabTrainer.sync_generation_weights``, beside TRL's own tag),
and completions under the trainer's sampling settings, read from TRL's public ``vllm_generation``.
"""

from __future__ import annotations


def vllm_completions(vllm, prompt_ids: list[list[int]], n: int, max_tokens: int, greedy: bool,
                     top_p: float | None = None, seed: int | None = None) -> list[list[int]]:
    """n completion token rows per prompt (prompt-major) from the vLLM engine training samples
    with, under the trainer's sampling settings (temperature, top_p, top_k, min_p, repetition
    penalty, generation_kwargs) and without log-probs; greedy sets temperature 0 (vLLM's
    argmax). Main process only: colocate uses this process's ``llm``, server mode the client
    TRL holds on the main process (TRL's own ``generate`` gathers over every process).

    ``top_p`` replaces the trainer's; ``seed`` seeds vLLM's per-request generator (torch's seed
    does not reach it): colocate gives prompt i its own ``SamplingParams(seed=seed + i * n)``
    (vLLM seeds a request's j-th of n samples ``seed + j``, so no two samples share a seed);
    server mode sends ``seed`` in ``generation_kwargs``, one SamplingParams for the whole call.
    ``vllm``: TRL's ``vllm_generation``. With sleep mode the engine is left asleep as TRL's generate
    leaves it; the caller marks its weights as dropped (TRL's own flag)."""
    params = {"n": n, "repetition_penalty": vllm.repetition_penalty, "temperature": vllm.temperature,
              "top_p": vllm.top_p if top_p is None else top_p, "top_k": vllm.top_k, "min_p": vllm.min_p or 0.0,
              "max_tokens": max_tokens, "logprobs": None}
    greedy_override = {"temperature": 0.0} if greedy else {}
    seeded = {} if seed is None else {"seed": seed}
    if vllm.mode == "server":
        out = vllm.vllm_client.generate(prompts=prompt_ids, structured_outputs_regex=vllm.structured_outputs_regex,
                                        generation_kwargs={**vllm.generation_kwargs, **greedy_override, **seeded},
                                        **params)
        return [list(ids) for ids in out["completion_ids"]]
    from trl.generation import vllm_generation  # the SamplingParams TRL builds its own requests with
    if vllm.structured_outputs_regex is not None:
        raise NotImplementedError("held-out eval through vLLM with structured_outputs_regex")
    settings = {**params, **vllm.generation_kwargs, **greedy_override}
    sampling = (vllm_generation.SamplingParams(**settings) if seed is None else   # one per prompt: its own seed
                [vllm_generation.SamplingParams(**{**settings, "seed": seed + i * n}) for i in range(len(prompt_ids))])
    if vllm.enable_sleep_mode:
        vllm.llm.wake_up(tags=["kv_cache"])
    outputs = vllm.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], sampling_params=sampling,
                                use_tqdm=False)
    if vllm.enable_sleep_mode:   # as TRL's generate leaves it: weights dropped, re-pushed before next use
        vllm.llm.sleep(level=2)
    return [list(c.token_ids) for request in outputs for c in request.outputs]
