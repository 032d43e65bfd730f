"""The drop-in's evaluation scores its ``eval_dataset`` as a named benchmark: inside TRL's
evaluation (``eval_strategy`` / ``eval_steps``, or ``trainer.evaluate()``), beside TRL's own
reward metrics, under the same ``eval_`` prefix (``eval_<name>_`` for a dict of eval datasets):

    eval_avg_at_n, eval_pass_at_k (k = 1, 2, 4, ... <= n, and n), eval_maj_at_n, eval_sd_at_n,
    eval_mean_length          (world/benchmark_scores.py: formulas, tie-breaking)

Detail: docs/runs.md, "grpolab.trainer.benchmark_eval".
"""

from __future__ import annotations

import warnings

import torch

from grpolab.tasks.answers import EXTRACTORS, make_extractor
from grpolab.tasks.benchmarks import answer_equivalence
from grpolab.tasks.benchmarks import rng_devices
from grpolab.trainer import dropin
from grpolab.world.benchmark_scores import benchmark_scores
from grpolab.world.generation import sample


def resolve_answer_extractor(answer_extractor, correctness) -> tuple[object, object]:
    """(extractor completion -> answer or None, equivalence (a, b) -> bool or None) of the drop-in's
    majority vote; (None, None) when neither ``answer_extractor`` nor a task correctness source gives one."""
    task = getattr(correctness, "task", None)   # dropin.task_correctness marks its task
    if answer_extractor is None:
        if task is None or getattr(task, "extract", None) is None:
            return None, None
        return task.extract, answer_equivalence(task)
    if isinstance(answer_extractor, str):
        if answer_extractor not in EXTRACTORS or answer_extractor == "regex":
            raise ValueError(f"answer_extractor: unknown extractor {answer_extractor!r}; valid: a callable "
                             f"(completion -> answer or None) or {', '.join(e for e in EXTRACTORS if e != 'regex')}")
        return make_extractor(answer_extractor), None
    if not callable(answer_extractor):
        raise ValueError(f"answer_extractor: expected a callable (completion -> answer or None) or an extractor "
                         f"name, got {type(answer_extractor).__name__}")
    return answer_extractor, None


class BenchmarkEvaluation:
    """The benchmark scores of a dataset a ``GrpoLabTrainer`` evaluates (its public model, settings
    and reward functions): correctness by the trainer's ``correctness`` (a ``Correctness``), the
    majority vote by ``answer_extract`` / ``answer_equivalent`` (``resolve_answer_extractor``)."""

    eval_batch_prompts = 32   # prompts per generate call

    def __init__(self, trainer, correctness, answer_extract, answer_equivalent):
        self.trainer, self.correctness = trainer, correctness
        self.answer_extract, self.answer_equivalent = answer_extract, answer_equivalent
        self.warned_no_benchmark = self.warned_no_extractor = False

    def scores(self, dataset) -> dict:
        """avg_at_n, pass_at_k, maj_at_n (given an answer extractor), sd_at_n and mean_length of
        ``dataset`` (its ``prompt`` column)."""
        trainer = self.trainer
        if self.correctness.kind == "none":
            if not self.warned_no_benchmark:
                warnings.warn("GrpoLabTrainer: no correctness= given, so evaluation reports TRL's reward metrics only "
                              "(no avg@k, pass@k, maj@k); give correctness=<reward name | column | callable>", stacklevel=4)
                self.warned_no_benchmark = True
            return {}
        examples, args = list(dataset), trainer.args
        n = args.num_generations_eval or args.num_generations
        model = trainer.accelerator.unwrap_model(trainer.model)
        hits, answers, lengths = [], [], []
        with torch.random.fork_rng(devices=rng_devices(next(model.parameters()).device)):
            torch.manual_seed(args.seed)
            for start in range(0, len(examples), self.eval_batch_prompts):
                chunk = examples[start:start + self.eval_batch_prompts]
                texts, lens = sample(model, trainer.processing_class, [self._prompt_text(r["prompt"]) for r in chunk],
                                     n, args.max_completion_length, args.temperature,
                                     top_p=args.top_p if args.top_p is not None else 1.0)
                lengths.extend(lens)
                repeated = [r for r in chunk for _ in range(n)]
                correct = self._benchmark_correct(repeated, texts)
                for i in range(len(chunk)):
                    hits.append(correct[i * n:(i + 1) * n])
                    answers.append(self._answers(texts[i * n:(i + 1) * n]))
        if not hits:
            return {}
        return benchmark_scores(hits, answers if self.answer_extract is not None else None, lengths,
                                self.answer_equivalent)

    def _answers(self, texts: list[str]) -> list:
        """Each completion's extracted answer; no extractor: said once, and maj_at_n not reported."""
        if self.answer_extract is not None:
            return [self.answer_extract(t) for t in texts]
        if not self.warned_no_extractor:
            warnings.warn("GrpoLabTrainer: no answer_extractor= given, so evaluation reports no maj@n (whole "
                          "completions are not answers to vote on); give answer_extractor=<callable | boxed | hash | "
                          "last_number | answer_tag | none>", stacklevel=5)
            self.warned_no_extractor = True
        return [None] * len(texts)

    def _prompt_text(self, prompt) -> str:
        """A plain prompt as it is; a conversational one through the tokenizer's chat template."""
        if isinstance(prompt, str):
            return prompt
        return self.trainer.processing_class.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)

    def _benchmark_correct(self, examples: list[dict], texts: list[str]) -> list[bool]:
        """Correctness of each completion by the trainer's source, called as TRL calls rewards."""
        trainer, kind, key = self.trainer, self.correctness.kind, self.correctness.key
        conversational = isinstance(examples[0]["prompt"], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
        if kind == "column":
            return dropin.correct_from_column(completions, [r[key] for r in examples])
        ids = trainer.processing_class(texts, add_special_tokens=False)["input_ids"]
        columns = {k: [r[k] for r in examples] for k in examples[0] if k != "prompt"}
        call = key if kind == "callable" else trainer.reward_funcs[key]
        if isinstance(call, torch.nn.Module):
            raise ValueError(f"correctness: {trainer.reward_func_names[key]!r} is a reward model; evaluation's "
                             "benchmark scores need a reward function, a dataset column or a callable")
        out = call(prompts=[r["prompt"] for r in examples], completions=completions, completion_ids=ids,
                   trainer_state=trainer.state, **columns)
        if kind == "callable":
            return [bool(v) for v in out]
        return dropin.correct_from_reward(out)
