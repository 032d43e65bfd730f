"""A test double of vLLM as TRL 1.16 drives it. vLLM itself cannot run here (no CUDA, no vLLM
wheel), so the tests that cover ``generation.backend: vllm`` use this instead; say so in any
claim built on them.

What it doubles, with TRL 1.16's exact call signatures (trl/generation/vllm_generation.py and
vllm_client.py): ``vllm.LLM`` (constructor keywords, ``generate(prompts, sampling_params,
use_tqdm)`` returning RequestOutput-shaped objects, ``llm_engine...model_runner.model.
load_weights``, ``reset_prefix_cache``, ``sleep``, ``wake_up``), ``vllm.SamplingParams`` and
``trl.generation.vllm_client.VLLMClient`` (``init_communicator``, ``get_server_info``,
``update_named_params``, ``reset_prefix_cache``, ``generate`` returning its dict). Behind both
sits one engine: its OWN copy of the model, loaded from the path vLLM would load, sampled with
transformers under its own RNG, returning vLLM's "processed" log-probs (after temperature). Its
weights change only through ``load_weights`` / ``update_named_params``, so an eval that skips
the weight sync sees stale weights, as with real vLLM. Every call is recorded in ``ENGINE_LOG``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace

import torch

ENGINE_LOG: list[dict] = []   # every engine call of the current test, in order
ENGINES: list["_Engine"] = []


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class SamplingParams:
    """The vllm.SamplingParams fields TRL and grpolab set; any other keyword is a TypeError, as in vLLM."""

    def __init__(self, n: int = 1, repetition_penalty: float = 1.0, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, min_p: float = 0.0, max_tokens: int | None = 16, logprobs: int | None = None,
                 seed: int | None = None, structured_outputs=None):
        self.n, self.repetition_penalty, self.temperature = n, repetition_penalty, temperature
        self.top_p, self.top_k, self.min_p, self.max_tokens = top_p, top_k, min_p, max_tokens
        self.logprobs, self.seed, self.structured_outputs = logprobs, seed, structured_outputs


class _Engine:
    """The model vLLM would serve: loaded from ``path``, sampled under a private RNG."""

    def __init__(self, path: str, seed: int = 0):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.seed, self.requests = seed, 0
        ENGINES.append(self)

    def load_weights(self, weights) -> set:
        params = dict(self.model.named_parameters())
        names = set()
        for name, tensor in weights:
            params[name].data.copy_(tensor.detach().to(params[name].dtype))   # unknown name: KeyError, as vLLM
            names.add(name)
        ENGINE_LOG.append({"kind": "load_weights", "names": len(names)})
        return names

    @torch.no_grad()
    def sample(self, prompt_ids: list[list[int]], p: SamplingParams) -> list[list[tuple[list[int], list | None]]]:
        """Per prompt, ``p.n`` (token_ids, per-token logprob dicts) rows; stop after EOS (kept), as vLLM."""
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        width = max(len(ids) for ids in prompt_ids)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in prompt_ids])
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])
        greedy = p.temperature == 0
        with torch.random.fork_rng(devices=[]):   # vLLM samples with its own RNG, never the trainer's
            # a request's own seed fixes its samples, whatever came before (vLLM's per-request generator)
            torch.manual_seed(self.seed * 1_000_003 + self.requests if p.seed is None else p.seed)
            self.requests += 1
            out = self.model.generate(
                input_ids=input_ids, attention_mask=attention, do_sample=not greedy,
                temperature=None if greedy else p.temperature, top_k=None if greedy else p.top_k,
                top_p=None if greedy else p.top_p, min_p=p.min_p or None, repetition_penalty=p.repetition_penalty,
                max_new_tokens=p.max_tokens, num_return_sequences=p.n, pad_token_id=pad, eos_token_id=eos,
                output_logits=True, return_dict_in_generate=True)
        tokens = out.sequences[:, width:]
        logits = torch.stack(out.logits, 1).float()            # (rows, T, V), before processing
        logp = torch.log_softmax(logits / (1.0 if greedy else p.temperature), -1)   # "processed_logprobs"
        rows = []
        for r in range(tokens.size(0)):
            ids = tokens[r].tolist()
            ids = ids[:ids.index(eos) + 1] if eos in ids else ids
            lps = None
            if p.logprobs is not None:
                lps = [{t: Logprob(float(logp[r, i, t]), int((logp[r, i] > logp[r, i, t]).sum()) + 1)}
                       for i, t in enumerate(ids)]
            rows.append((ids, lps))
        ENGINE_LOG.append({"kind": "generate", "prompts": len(prompt_ids), "n": p.n, "max_tokens": p.max_tokens,
                           "temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "seed": p.seed, "logprobs": p.logprobs,
                           "lengths": [len(ids) for ids, _ in rows], "weights_sum": self.weights_sum()})
        return [rows[i * p.n:(i + 1) * p.n] for i in range(len(prompt_ids))]

    def weights_sum(self) -> float:
        return float(sum(t.double().sum() for t in self.model.parameters()))


class LLM:
    """vllm.LLM with the constructor keywords TRL 1.16's colocate mode passes."""

    def __init__(self, model: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, max_num_seqs: int | None = None, enable_sleep_mode: bool = False,
                 model_impl: str = "auto", distributed_executor_backend: str | None = None, seed: int = 0,
                 max_num_batched_tokens: int | None = None, logprobs_mode: str = "raw_logprobs",
                 quantization: str | None = None, trust_remote_code: bool = False):
        self.logprobs_mode, self.enable_sleep_mode, self.sleeping = logprobs_mode, enable_sleep_mode, False
        self.engine = _Engine(model, seed)
        runner = SimpleNamespace(model=self.engine)
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner)),
            model_config=SimpleNamespace(max_model_len=max_model_len or self.engine.model.config.max_position_embeddings))

    def generate(self, prompts, sampling_params: SamplingParams | None = None, use_tqdm: bool = True):
        if self.sleeping:
            raise RuntimeError("generate on a sleeping engine")
        p = sampling_params or SamplingParams()
        ids = [row["prompt_token_ids"] for row in prompts]
        if isinstance(p, list):   # vLLM: one SamplingParams per prompt, each its own request
            if len(p) != len(ids):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            groups = [self.engine.sample([prompt], own)[0] for prompt, own in zip(ids, p)]
        else:
            groups = self.engine.sample(ids, p)
        out = []
        for i, (prompt, rows) in enumerate(zip(ids, groups)):
            completions = [CompletionOutput(j, self.engine.tokenizer.decode(t), t, None, lp)
                           for j, (t, lp) in enumerate(rows)]
            out.append(RequestOutput(str(i), None, list(prompt), completions))
        return out

    def reset_prefix_cache(self) -> bool:
        ENGINE_LOG.append({"kind": "reset_prefix_cache"})
        return True

    def sleep(self, level: int = 1) -> None:
        self.sleeping = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.sleeping = False


class VLLMClient:
    """trl.generation.vllm_client.VLLMClient against a `trl vllm-serve` of ``MODEL_PATH``."""

    MODEL_PATH: str | None = None   # what `trl vllm-serve --model` would serve; set by the test
    instances: list["VLLMClient"] = []

    def __init__(self, base_url: str | None = None, host: str = "0.0.0.0", server_port: int = 8000,
                 group_port: int = 51216, connection_timeout: float = 0.0):
        self.base_url = base_url or f"http://{host}:{server_port}"
        self.engine = _Engine(self.MODEL_PATH)
        self.communicator = None
        VLLMClient.instances.append(self)

    def init_communicator(self, device=0) -> None:
        self.communicator = device

    def get_server_info(self) -> dict:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def update_named_params(self, metadata, named_params) -> None:
        if self.communicator is None:
            raise RuntimeError("init_communicator first")
        pairs = list(named_params)
        assert [m[0] for m in metadata] == [name for name, _ in pairs], "metadata and stream disagree"
        self.engine.load_weights(pairs)

    def reset_prefix_cache(self) -> None:
        ENGINE_LOG.append({"kind": "reset_prefix_cache"})

    def generate(self, prompts, features=None, n: int = 1, repetition_penalty: float = 1.0, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, max_tokens: int = 16,
                 logprobs: int | None = 0, structured_outputs_regex: str | None = None,
                 generation_kwargs: dict | None = None) -> dict:
        params = {"n": n, "repetition_penalty": repetition_penalty, "temperature": temperature, "top_p": top_p,
                  "top_k": top_k, "min_p": min_p, "max_tokens": max_tokens, "logprobs": logprobs}
        params.update(generation_kwargs or {})
        groups = self.engine.sample([list(p) for p in prompts], SamplingParams(**params))
        rows = [row for group in groups for row in group]
        return {"prompt_ids": [list(p) for p in prompts], "completion_ids": [ids for ids, _ in rows],
                "logprobs": None if logprobs is None else [[[d[t].logprob] for d, t in zip(lp, ids)] for ids, lp in rows],
                "logprob_token_ids": None if logprobs is None else [[[t] for t in ids] for ids, _ in rows]}


def install(monkeypatch, served_model: str | None = None) -> None:
    """Put the double where TRL looks for vLLM, and tell grpolab's config check it is installed."""
    from trl.generation import vllm_generation

    from grpolab.experiment import engines
    ENGINE_LOG.clear()
    ENGINES.clear()
    VLLMClient.instances.clear()
    VLLMClient.MODEL_PATH = served_model
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "LLM", LLM, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", SamplingParams, raising=False)
    monkeypatch.setattr(vllm_generation, "VLLMClient", VLLMClient)
    monkeypatch.setattr(engines, "vllm_installed", lambda: True)
    # TRL's colocate mode writes these into os.environ: unchanged now, restored (or removed) when the test ends
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        present = key in os.environ
        monkeypatch.setenv(key, os.environ.get(key, ""))
        if not present:
            monkeypatch.delenv(key)
