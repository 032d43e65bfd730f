"""The task registry: every ``task.name`` an experiment may use, built and validated here.

Detail: docs/runs.md, "grpolab.tasks".
"""

from __future__ import annotations

from grpolab.errors import ConfigError, did_you_mean
from grpolab.tasks.answers import make_extractor, make_grader
from grpolab.tasks.prompting import Prompting
from grpolab.tasks.rewards import parse_rewards
from grpolab.tasks.verified import Grading, VerifiedTask, eval_sample_rows, log_eval_samples  # noqa: F401 - re-exported
from grpolab.world import generated

_SHARED = {"template": "{prompt}", "system": None, "chat": "auto", "extract": None, "regex": None, "grade": None,
           "tolerance": 1e-6, "rewards": ["correctness"], "max_completion_length": None}
# name -> (source keys and their defaults, default extractor, default grader, default template)
SOURCES = {
    "local_dataset": ({"path": None, "prompt_field": "prompt", "answer_field": "answer", "eval_fraction": 0.1,
                       "split": None, "reference_extract": "none", "revision": None, "config": None,
                       "held_out": None}, "none", "exact", "{prompt}"),
    "reasoning_gym": ({"dataset": None, "config": {}}, "answer_tag", "task",
                      "{prompt}\n\nEnd your reply with the final answer inside <answer></answer> tags."),
}
from grpolab.envs import (
    ENVS,  # noqa: E402 - multi-turn environments (grpolab.envs) are tasks too
    make_env_task,
)
from grpolab.method.spec import with_reward_weights
from grpolab.tasks.sources import LocalSource, ReasoningGymSource, RowFields

TASK_NAMES = (*generated.TASKS, *SOURCES, *ENVS)


def task_of(section: dict):
    """The task a config's ``task:`` mapping names (``name`` plus that task's parameters)."""
    return make_task(section["name"], **{k: v for k, v in section.items() if k != "name"})


def make_task(name: str, **params):
    """Build a task by name; unknown names, keys or values raise ConfigError naming the key."""
    if name in generated.TASKS:
        return generated.make_task(name, **params)
    if name in ENVS:
        return make_env_task(name, **params)
    if name not in SOURCES:
        raise ConfigError(f"task.name: unknown task {name!r}{did_you_mean(name, TASK_NAMES)}; valid: {', '.join(TASK_NAMES)}")
    source_defaults, extract, grade, template = SOURCES[name]
    defaults = {**source_defaults, **_SHARED, "extract": extract, "grade": grade, "template": template}
    unknown = set(params) - set(defaults)
    if unknown:
        raise ConfigError(f"task.{sorted(unknown)[0]}: not a key of task {name!r}; valid: {', '.join(defaults)}")
    merged = {**defaults, **params}
    required = "path" if name == "local_dataset" else "dataset"
    if merged[required] is None:
        raise ConfigError(f"task.{required}: required for task {name!r}")
    source = _source(name, merged)
    extractor = make_extractor(merged["extract"], merged["regex"])
    tolerance = merged["tolerance"]
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
        raise ConfigError(f"task.tolerance: expected a number, got {tolerance!r}")
    grader = make_grader(merged["grade"], float(tolerance))
    prompting = Prompting(merged["template"], merged["system"], merged["chat"])
    rewards = parse_rewards(merged["rewards"])
    return VerifiedTask(name, merged, source, prompting, Grading(extractor, merged["grade"], grader), rewards,
                        _max_length(merged, source))


def _source(name: str, p: dict):
    if name == "local_dataset":
        fields = RowFields(p["prompt_field"], p["answer_field"], p["reference_extract"])
        return LocalSource(p["path"], fields, p["eval_fraction"], p["split"], p["revision"], p["config"], p["held_out"])
    return ReasoningGymSource(p["dataset"], p["config"])


def _max_length(p: dict, source) -> int:
    """The completion cap in tokens: task.max_completion_length, else the longest reference + 4
    for exact whole-completion answers (the toy world's character tokens), else 256."""
    value = p["max_completion_length"]
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"task.max_completion_length: expected a positive integer, got {value!r}")
        return value
    if p["extract"] == "none" and hasattr(source, "examples"):
        if not getattr(source, "loaded", True):   # a hub dataset still to be downloaded: no rows to measure yet
            raise ConfigError("task.max_completion_length: give it for a hub dataset that is not in the local cache "
                              "(the default, the longest reference + 4 tokens, needs its rows)")
        return max(len(e.answer) for e in source.examples) + 4
    return 256


def hub_sources(task) -> dict[str, str]:
    """``dataset`` / ``held_out`` -> ``org/name@commit`` of the hub snapshots a task read (hub.py)."""
    source = getattr(task, "source", None)
    return source.hub_refs() if hasattr(source, "hub_refs") else {}


def render_examples(task, examples: list, tokenizer) -> list:
    """Examples with the model's input text as prompt (toy tasks' prompts are already that)."""
    return task.render(examples, tokenizer) if hasattr(task, "render") else examples


def spec_with_task_weights(spec, task):
    """The method spec with the task's reward weights as ``reward_weights`` (one per component;
    the method's soft-overlong component, when on, weighs 1). Weights given both in the task and
    in ``method.reward_weights`` must agree; a weight list of the wrong length is an error."""
    task_weights = getattr(task, "reward_weights", None)
    given = task_weights if task_weights is not None and any(w != 1.0 for w in task_weights) else None
    return with_reward_weights(spec, given, "the weights of task.rewards", task.reward_names)
