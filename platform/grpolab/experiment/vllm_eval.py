"""Held-out eval through the vLLM engine training samples with (``generation.backend: vllm``).

With vLLM on, the policy that is trained is the one vLLM samples from: its kernels, its
sampling settings. So the held-out pass@k is drawn from the same engine (colocate: TRL's
``llm`` in this process; server: TRL's ``VLLMClient``), with the trainer's sampling settings,
after the current weights are pushed into it (TRL's own weight sync, once per step: the next
training generation reuses it). The prompts are tokenised as TRL tokenises training prompts.

Detail: docs/runs.md, "grpolab.experiment.vllm_eval".
"""

from __future__ import annotations

import dataclasses

from grpolab.errors import ConfigError
from grpolab.world.generation import decode_completions
from grpolab.world.models import load_model


class VllmEvalSampler:
    """``evaluate``'s sampler: completions from the trainer's vLLM engine."""

    def __init__(self, trainer, tokenizer):
        self.trainer, self.tokenizer = trainer, tokenizer

    def sync(self) -> None:
        """Every process, before each eval: the engine must hold the weights being evaluated."""
        self.trainer.sync_generation_weights()

    def __call__(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float = 1.0,
                 greedy: bool = False, top_p: float | None = None, seed: int | None = None) -> tuple[list[str], list[int]]:
        """``top_p`` (None: the trainer's) and ``seed`` (None: vLLM's own stream) go into each request."""
        if not greedy and temperature != self.trainer.temperature:   # evaluate passes train.temperature
            raise ValueError(f"vLLM eval samples at the training temperature {self.trainer.temperature}, "
                             f"asked for {temperature}")
        prompt_ids = self.tokenizer(text=prompts)["input_ids"]
        rows = self.trainer.vllm_completions(prompt_ids, 1 if greedy else n, max_new_tokens, greedy, top_p=top_p, seed=seed)
        return decode_completions(self.tokenizer, rows)


def eval_sampler(cfg, trainer, tokenizer) -> VllmEvalSampler | None:
    """The vLLM sampler when training generates with vLLM, else None (transformers generate)."""
    return VllmEvalSampler(trainer, tokenizer) if cfg.generation.backend == "vllm" else None


class SavedModelVllm:
    """``grpolab eval``'s sampler for a saved model of a run that generated with vLLM: the run's
    engine path holding the saved weights, so the re-scored numbers come from the engine the run's
    own evaluations came from. colocate: a vLLM ``LLM`` loading the model folder, as TRL's
    colocate mode loads the policy; server: TRL's ``VLLMClient`` of the run's ``trl vllm-serve``,
    the saved weights pushed into it as TRL's weight sync pushes them (the server serves them
    afterwards, as after a training step). Sampling: the run's top_k, min_p, repetition penalty
    and generation_kwargs (train.trl, else GRPOConfig's defaults); temperature, top_p, max_tokens
    and the seed are the benchmark's, in each request's own SamplingParams."""

    def __init__(self, generation: dict, trl: dict, model_dir):
        from transformers import AutoTokenizer
        from trl import GRPOConfig
        from trl.generation import vllm_generation  # where TRL finds vLLM, and the tests put their stand-in
        self.mode, self.vllm, self.model = generation.get("mode", "colocate"), vllm_generation, None
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        run = {**{f.name: f.default for f in dataclasses.fields(GRPOConfig)}, **(trl or {})}
        self.fixed = {"repetition_penalty": run["repetition_penalty"], "top_k": run["top_k"],
                      "min_p": run["min_p"] or 0.0}
        self.generation_kwargs = dict(run["generation_kwargs"] or {})
        if self.mode == "server":   # the weights travel from this process: the model is loaded here
            self.model, _ = load_model(model_dir)
            self.client = vllm_generation.VLLMClient(
                base_url=generation.get("server_base_url") or run["vllm_server_base_url"], host=run["vllm_server_host"],
                server_port=run["vllm_server_port"], group_port=run["vllm_group_port"],
                connection_timeout=run["vllm_server_timeout"])
            self.client.init_communicator(device=_device_index())
            self.push(self.model)
        else:
            self.llm = vllm_generation.LLM(
                model=str(model_dir), tensor_parallel_size=generation.get("tensor_parallel_size", 1),
                gpu_memory_utilization=generation.get("gpu_memory_utilization", 0.3),
                max_model_len=run["vllm_max_model_length"], model_impl=run["vllm_model_impl"], seed=0,
                max_num_batched_tokens=4096)   # as TRL: vLLM's memory profiler is misled by its larger default

    def push(self, model) -> None:
        """The saved weights into the server, named and streamed as TRL's ``sync_weights`` does."""
        import torch
        host = torch.device("cpu")   # host tensor on purpose: without CUDA the weights stream from the CPU
        device = torch.device("cuda", _device_index()) if torch.cuda.is_available() else host
        params = list(model.named_parameters())
        metadata = [(name, str(p.dtype).removeprefix("torch."), list(p.shape)) for name, p in params]
        self.client.update_named_params(metadata, ((name, p.data.to(device)) for name, p in params))
        self.client.reset_prefix_cache()

    def __call__(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, top_p: float | None = None,
                 seed: int | None = None) -> tuple[list[str], list[int]]:
        """Prompt-major completions; colocate seeds prompt i's request ``seed + i * n`` (vLLM seeds its
        j-th sample ``+ j``), server mode sends ``seed`` in the call's one SamplingParams."""
        prompt_ids = self.tokenizer(text=prompts)["input_ids"]
        params = {"n": n, **self.fixed, "temperature": temperature, "top_p": 1.0 if top_p is None else top_p,
                  "max_tokens": max_new_tokens, "logprobs": None}
        seeded = {} if seed is None else {"seed": seed}
        if self.mode == "server":
            out = self.client.generate(prompts=prompt_ids, generation_kwargs={**self.generation_kwargs, **seeded},
                                       **params)
            return decode_completions(self.tokenizer, out["completion_ids"])
        settings = {**params, **self.generation_kwargs}
        sampling = [self.vllm.SamplingParams(**settings, **({} if seed is None else {"seed": seed + i * n}))
                    for i in range(len(prompt_ids))]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], sampling_params=sampling,
                                    use_tqdm=False)
        return decode_completions(self.tokenizer, [list(c.token_ids) for r in outputs for c in r.outputs])


def _device_index() -> int:
    import torch
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def uses_vllm(generation: dict, where: str) -> bool:
    """Whether a saved run generated with vLLM; then vLLM must be here: numbers from another engine
    would be taken for the run's."""
    if (generation or {}).get("backend", "transformers") != "vllm":
        return False
    from trl.generation import vllm_generation
    if not vllm_generation.is_vllm_available():
        raise ConfigError(f"{where}: the run generated with vLLM (generation.backend: vllm, mode "
                          f"{generation.get('mode', 'colocate')}), so grpolab eval re-scores it through vLLM, which is "
                          "not installed here; run it on a CUDA machine with vLLM (pip install 'grpolab[gpu]')")
    return True
