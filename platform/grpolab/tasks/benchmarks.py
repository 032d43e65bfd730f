"""Named benchmarks: evaluation sets a run (or ``grpolab eval``) scores as papers report them.

Detail: docs/runs.md, "grpolab.tasks.benchmarks".
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from grpolab.errors import ConfigError, did_you_mean
from grpolab.tasks.sources import locate_rows, read_rows, to_examples
from grpolab.world.benchmark_scores import benchmark_scores

SOURCE_KEYS = ("path", "split", "config", "revision", "prompt_field", "answer_field", "reference_extract")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Benchmark:
    name: str
    source: object = "held_out"        # "held_out" or a mapping of SOURCE_KEYS
    size: int = 0
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 0
    seed: int = -1

    def key(self, score: str) -> str:
        """The metric key of one score, as MLflow stores it: ``eval/aime24/avg_at_32``."""
        return f"eval/{self.name}/{score}"


def parse_benchmarks(raw, where: str = "eval.benchmarks") -> tuple[Benchmark, ...]:
    """Validated benchmarks from their YAML list; errors name the entry and key."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of benchmarks ({{name, source, size, n, ...}}), got {raw!r}")
    out, names = [], set()
    for i, item in enumerate(raw):
        bench = parse_benchmark(item, f"{where}[{i}]")
        if bench.name in names:
            raise ConfigError(f"{where}[{i}].name: {bench.name!r} is listed twice; give each benchmark its own name")
        names.add(bench.name)
        out.append(bench)
    return tuple(out)


def parse_benchmark(item, where: str) -> Benchmark:
    if isinstance(item, Benchmark):
        return item
    fields = {f.name: f for f in dataclasses.fields(Benchmark)}
    if not isinstance(item, dict) or "name" not in item:
        raise ConfigError(f"{where}: expected a mapping with a name (and source, size, n, ...), got {item!r}")
    unknown = sorted(set(item) - set(fields))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key{did_you_mean(unknown[0], fields)}; valid: {', '.join(fields)}")
    name = item["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}.name: expected letters, digits, '_', '.' or '-' (a metric key part), got {name!r}")
    for key in ("size", "n", "max_tokens", "seed"):
        value = item.get(key, fields[key].default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}.{key}: expected an integer, got {value!r}")
    for key in ("temperature", "top_p"):
        value = item.get(key, fields[key].default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}.{key}: expected a number, got {value!r}")
    bench = Benchmark(**{**item, "temperature": float(item.get("temperature", 1.0)),
                         "top_p": float(item.get("top_p", 1.0)), "source": _source(item.get("source", "held_out"), where)})
    _check_ranges(bench, where)
    return bench


def _check_ranges(b: Benchmark, where: str) -> None:
    if b.n < 1:
        raise ConfigError(f"{where}.n: samples per prompt must be >= 1, got {b.n}")
    if b.size < 0 or b.max_tokens < 0:
        raise ConfigError(f"{where}.size and .max_tokens: must be >= 0 (0: the default), got {b.size} and {b.max_tokens}")
    if b.seed < -1:
        raise ConfigError(f"{where}.seed: must be >= 0, or -1 (the run seed), got {b.seed}")
    if not b.temperature > 0:
        raise ConfigError(f"{where}.temperature: must be > 0 (sampled; n samples per prompt), got {b.temperature}")
    if not 0 < b.top_p <= 1:
        raise ConfigError(f"{where}.top_p: must be in (0, 1], got {b.top_p}")


def _source(raw, where: str):
    """``held_out``, or a path / hub id (a string), or a mapping of SOURCE_KEYS; a path is located now."""
    if raw == "held_out":
        return raw
    if isinstance(raw, str):
        raw = {"path": raw}
    if not isinstance(raw, dict) or "path" not in raw:
        raise ConfigError(f"{where}.source: expected held_out, a path / hub dataset id, or a mapping with a path "
                          f"(keys: {', '.join(SOURCE_KEYS)}), got {raw!r}")
    unknown = sorted(set(raw) - set(SOURCE_KEYS))
    if unknown:
        raise ConfigError(f"{where}.source.{unknown[0]}: unknown key; valid: {', '.join(SOURCE_KEYS)}")
    locate_rows(raw["path"], raw.get("split"), raw.get("config"), raw.get("revision"), f"{where}.source")
    return dict(raw)


def check_for_task(benchmarks, task, where: str = "eval.benchmarks") -> None:
    """Named benchmarks score single-turn completions; a multi-turn task runs whole episodes."""
    if benchmarks and hasattr(task, "evaluate"):
        raise ConfigError(f"{where}: task {task.name!r} evaluates whole episodes; named benchmarks are for "
                          "single-turn tasks (remove eval.benchmarks)")


def benchmark_examples(bench: Benchmark, task, seed: int, held_out_seed: int = -1, default_size: int = 0) -> list:
    """The benchmark's examples (before rendering): the first ``size`` of the task's held-out draw
    for ``seed`` (or the fixed ``held_out_seed``), or the first ``size`` rows of its file."""
    where = f"benchmark {bench.name!r}"
    if bench.source == "held_out":
        size = bench.size or default_size
        fixed = {"held_out_seed": held_out_seed} if held_out_seed >= 0 else {}
        examples = task.splits(seed, 0, size, **fixed)[1]
    else:
        src = bench.source
        rows = locate_rows(src["path"], src.get("split"), src.get("config"), src.get("revision"), f"{where} source")
        records, _ = read_rows(rows)
        examples = to_examples(records, src.get("prompt_field", "prompt"), src.get("answer_field", "answer"),
                               src.get("reference_extract", "none"), rows.where(), f"{where} source")
        size = bench.size or len(examples)
        examples = examples[:size]
    if len(examples) < size:
        raise ConfigError(f"{where}: size {size} asked, its source holds {len(examples)} distinct prompts; "
                          f"valid: 1 to {len(examples)}")
    return examples


def check_overlap(bench: Benchmark, examples: list, train_prompts: set) -> None:
    """Refuse a benchmark that shares prompts with the training set: it would measure recall.
    Prompts are compared with whitespace runs collapsed and case folded, so a copy that differs
    only in spacing or capitals still counts as shared."""
    train = {_normalised(t) for t in train_prompts}
    shared = sum(_normalised(e.meta.get("question", e.prompt)) in train for e in examples)
    if shared:
        raise ConfigError(f"benchmark {bench.name!r}: {shared} of its {len(examples)} prompts are training prompts "
                          "of the run; give a source the run did not train on (or a size within eval.final_prompts "
                          "for the held_out source)")


def _normalised(prompt: str) -> str:
    return " ".join(str(prompt).split()).casefold()


def answer_of(task, completion: str) -> str | None:
    """The answer a completion gives, as majority votes count it: the task's extractor, or the
    stripped completion for toy tasks (their completion is the answer)."""
    extract = getattr(task, "extract", None)
    return extract(completion) if extract is not None else completion.strip()


def answer_equivalence(task):
    """The equivalence majority votes cluster answers by: the task's string grader (math-verify's
    ``1/2`` = ``0.5``, numeric tolerance, exact), or None (string equality) for toy tasks and for
    a source's own scorer (``grade: task``), which grades against a reference only."""
    grader = getattr(task, "grader", None)
    return grader if callable(grader) and getattr(task, "grade_kind", None) != "task" else None


def rng_devices(device) -> list[int]:
    """The CUDA generators ``torch.random.fork_rng`` saves and restores around a seeded draw: the
    model's own device's (cuda:i -> [i]), none on the CPU. Forking every visible device would
    create a context on, and touch the generators of, GPUs other ranks own."""
    import torch
    device = torch.device(device if device is not None else "cpu")
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def score_benchmark(bench: Benchmark, task, examples: list, sampler, seed: int,
                    batch_completions: int = 256, device=None) -> tuple[dict, list]:
    """(metrics keyed eval/<name>/<score>, sample rows) of ``examples`` (rendered). ``sampler(prompts,
    n, max_new_tokens, temperature, top_p, seed) -> (texts, lengths)`` draws n completions per
    prompt, prompt-major, about ``batch_completions`` per call; it runs with the torch generator
    seeded by ``seed`` and restored afterwards, and is also given ``seed + start * n`` (``start``:
    the chunk's first prompt index) for engines with their own generator (vLLM's per-request seed).
    ``device``: the sampling model's (rng_devices; None: the CPU's generator only)."""
    import torch
    hits, answers, lengths, rows = [], [], [], []
    batch_prompts = max(1, batch_completions // bench.n)
    with torch.random.fork_rng(devices=rng_devices(device)):
        torch.manual_seed(seed)
        for start in range(0, len(examples), batch_prompts):
            chunk = examples[start:start + batch_prompts]
            texts, lens = sampler([e.prompt for e in chunk], bench.n, bench.max_tokens, bench.temperature, bench.top_p,
                                  seed + start * bench.n)
            lengths.extend(lens)
            for i, example in enumerate(chunk):
                own = texts[i * bench.n:(i + 1) * bench.n]
                hits.append([bool(task.is_correct(example, t)) for t in own])
                answers.append([answer_of(task, t) for t in own])
                question = example.meta.get("question", example.prompt)
                rows.extend({"benchmark": bench.name, "index": start + i, "question": question, "sample": j,
                             "completion": t, "extracted": answers[-1][j], "answer": example.answer,
                             "correct": hits[-1][j], "length": lens[i * bench.n + j]} for j, t in enumerate(own))
    scores = benchmark_scores(hits, answers, lengths, answer_equivalence(task))
    return {bench.key(score): value for score, value in scores.items()}, rows


def resolve_benchmarks(raw, task, eval_cap: int, engine_sampling: tuple[float, float] | None = None) -> list[dict]:
    """``eval.benchmarks`` checked against the run and written out in full (max_tokens 0 -> the
    eval cap), as the run logs and stores them. ``engine_sampling``: (temperature, top_p) of a vLLM
    engine the run evaluates with: its temperature is the trainer's (vllm_eval.py refuses another),
    while top_p and the seed travel in each request's own SamplingParams."""
    benchmarks = parse_benchmarks(raw)
    check_for_task(benchmarks, task)
    out = []
    for i, bench in enumerate(benchmarks):
        if engine_sampling is not None and bench.temperature != engine_sampling[0]:
            raise ConfigError(f"eval.benchmarks[{i}].temperature: with generation.backend vllm a benchmark samples "
                              f"at the trainer's temperature {engine_sampling[0]} (train.temperature); got "
                              f"{bench.temperature} (top_p and seed may differ: they go into each vLLM request)")
        out.append(dataclasses.asdict(dataclasses.replace(bench, max_tokens=bench.max_tokens or eval_cap)))
    return out
