"""Held-out eval through the vLLM engine training samples with (``generation.backend: vllm``).

With vLLM on, the policy that is trained is the one vLLM samples from: its kernels, its
sampling settings. So the held-out pass@k is drawn from the same engine (colocate: TRL's
``llm`` in this process; server: TRL's ``VLLMClient``), with the trainer's sampling settings,
after the current weights are pushed into it (TRL's own weight sync, once per step: the next
training generation reuses it). The prompts are tokenised as TRL tokenises training prompts.

vLLM cannot run on the machines grpolab is tested on (no CUDA, no vLLM wheel): the tests drive
this path through a test double of TRL 1.16's ``LLM`` / ``VLLMClient`` interface
(tests/vllm_double.py), not through vLLM itself.
"""

from __future__ import annotations

from grpolab.world.generation import decode_completions


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
