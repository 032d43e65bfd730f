"""A run's named benchmarks (tasks/benchmarks.py): their examples drawn and checked against the
run's training prompts once, then scored at every evaluation beside the held-out set."""

from __future__ import annotations

from grpolab.errors import ConfigError
from grpolab.tasks import render_examples
from grpolab.tasks.benchmarks import Benchmark, benchmark_examples, check_overlap, parse_benchmarks, score_benchmark
from grpolab.tracking.held_out import BENCHMARK_KEY, canonical_metric
from grpolab.world.benchmark_scores import reported_ks


def transformers_sampler(model, tokenizer):
    """``score_benchmark``'s sampler through transformers ``generate`` on ``model``."""
    from grpolab.world.generation import sample

    def draw(prompts, n, max_new_tokens, temperature, top_p, seed):   # seeded by score_benchmark's torch seed
        return sample(model, tokenizer, prompts, n, max_new_tokens, temperature, top_p=top_p)
    return draw


def engine_sampler(engine):
    """``score_benchmark``'s sampler through the run's vLLM engine (vllm_eval.py). vLLM samples
    with its own generator, which torch's seed does not reach: each request carries ``seed`` and
    ``top_p`` in its own SamplingParams. The temperature is the trainer's (the config checked it)."""
    def draw(prompts, n, max_new_tokens, temperature, top_p, seed):
        return engine(prompts, n, max_new_tokens, temperature, top_p=top_p, seed=seed)
    return draw


class RunBenchmarks:
    """The benchmarks of one run with their rendered examples, in the order the config lists them."""

    def __init__(self, items: list[tuple[Benchmark, list]], seed: int):
        self.items, self.seed = items, seed

    @classmethod
    def for_run(cls, cfg, task, train: list, tokenizer, benchmarks=None) -> RunBenchmarks:
        """``cfg``'s benchmarks (or ``benchmarks``), drawn as the run draws its held-out set; one that
        shares a prompt with ``train`` (the run's training examples) is refused, naming the count."""
        train_prompts = {e.prompt for e in train}
        items = []
        for bench in parse_benchmarks(cfg.eval.benchmarks if benchmarks is None else benchmarks):
            examples = benchmark_examples(bench, task, cfg.seed, cfg.eval.seed, cfg.eval.final_prompt_count)
            check_overlap(bench, examples, train_prompts)
            items.append((bench, render_examples(task, examples, tokenizer)))
        return cls(items, cfg.seed)

    def evaluate(self, task, model, tokenizer, engine=None) -> tuple[dict, list]:
        """(eval/<name>/<score> metrics of every benchmark, their sample rows)."""
        metrics, rows = {}, []
        draw = engine_sampler(engine) if engine is not None else transformers_sampler(model, tokenizer)
        for bench, examples in self.items:
            seed = bench.seed if bench.seed >= 0 else self.seed
            scores, samples = score_benchmark(bench, task, examples, draw, seed,
                                              device=next(model.parameters()).device if model is not None else None)
            metrics.update(scores)
            rows.extend(samples)
        return metrics, rows


def check_named_scores(metrics, benchmarks_raw, where: str = "metric") -> None:
    """A study metric that reads a named benchmark's score needs the benchmark in the study's
    base (``eval.benchmarks``) and a score it reports: avg/maj/sd at its n, pass at a reported k."""
    # names and n only: each rung's build_config validates the whole list (and locates its sources once)
    declared = {b.get("name"): b.get("n", 1) for b in benchmarks_raw or () if isinstance(b, dict)}
    for metric in metrics:
        key = canonical_metric(metric).partition(":")[2].partition(">=")[0]
        if not BENCHMARK_KEY.match(key):
            continue
        name, score = key.split("/")[1], key.split("/")[2]
        if name not in declared:
            raise ConfigError(f"{where} {metric!r}: no benchmark {name!r} in base.eval.benchmarks; declared: "
                              f"{', '.join(declared) or 'none'}")
        n = declared[name]
        valid = [f"avg_at_{n}", f"maj_at_{n}", f"sd_at_{n}", "mean_length", *(f"pass_at_{k}" for k in reported_ks(n))]
        if score not in valid:
            raise ConfigError(f"{where} {metric!r}: benchmark {name!r} (n = {n}) reports {', '.join(valid)}")
