"""What an MLflow run says about itself: its name, its params and its tags.

Params are limited to what defines the run (the stock MLflow UI shows one column per param, so
every constant flag is a column of noise): the method's core axes, the axes that act under its
surrogate / KL / sampling / length settings, fine-grained axes only where they differ from the
default, the training budget, the evaluation, the task, the model, the warm start and the seed.
The full resolved configuration is still stored as the ``config.json`` artifact.
"""

from __future__ import annotations

import dataclasses
import getpass

from grpolab.method.registry import METHODS
from grpolab.method.sampler_corrections import logged
from grpolab.method.settings import logged as param_logged
from grpolab.method.settings import param_table
from grpolab.method.spec import MethodSpec

# The training budget and rollout shape: every run states them, whatever their value.
CORE_TRAIN = ("steps", "group_size", "prompts_per_rollout", "minibatches", "num_iterations", "grad_accum",
              "learning_rate", "temperature", "max_completion_length")
CORE_EVAL = ("every", "prompts", "k", "max_completion_length")



def flat_keys(d: dict, prefix: str = "") -> dict[str, object]:
    """A nested dict as ``a.b`` keys (MLflow's param names), tuples as lists, values kept."""
    out: dict[str, object] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flat_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out

def method_params(spec: MethodSpec) -> dict:
    """The axes that define this update rule: each setting where its record's log policy says
    (``method/settings.py``: always, where the spec reads it, where away from its default)."""
    table = param_table()
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)
            if param_logged(table, f.name, spec, f.default)}


def run_params(cfg) -> dict:
    """Nested dict of the params of one run (flattened to ``a.b`` keys by the recorder)."""
    ws = cfg.warm_start
    if cfg.model.path is not None or not ws.enabled:
        warm = {"enabled": False}
    else:
        defaults = type(ws)()
        warm = {"band": list(ws.band), **{k: getattr(ws, k) for k in ("learning_rate", "max_steps", "seed")
                                          if getattr(ws, k) != getattr(defaults, k)}}
    model = {"path": cfg.model.path} if cfg.model.path is not None else {"preset": cfg.model.preset}
    if getattr(cfg.model, "sha256", None) is not None:   # the file a shipped base model must be
        model["sha256"] = cfg.model.sha256
    if getattr(cfg.model, "revision", None) is not None:   # a hub id's revision (the commit is the grpolab.hub.model tag)
        model["revision"] = cfg.model.revision
    g = cfg.generation   # a vLLM sampler: its correction and the bounds it reads (method/sampler_corrections.py)
    sampler = {"generation": logged(g.is_correction, g.is_min, g.is_max)} if g.backend == "vllm" else {}
    return {"method": {"name": cfg.method_name, **method_params(cfg.spec)},
            "task": dict(cfg.task), "model": model, "warm_start": warm,
            "train": _core_or_changed(cfg.train, CORE_TRAIN), "eval": _eval_params(cfg.eval),
            **sampler, "seed": cfg.seed}


def _eval_params(ev) -> dict:
    """The eval section's params; each named benchmark under its name (``eval.benchmarks.aime24.n``)."""
    out = _core_or_changed(ev, CORE_EVAL)
    if "benchmarks" in out:
        out["benchmarks"] = {b["name"]: {k: v for k, v in b.items() if k != "name"} for b in out["benchmarks"]}
    return out


def _core_or_changed(section, core: tuple[str, ...]) -> dict:
    """The section's core fields, plus any other field set away from its default (e.g. dtype)."""
    defaults = type(section)()
    return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)
            if f.name in core or getattr(section, f.name) != getattr(defaults, f.name)}


def method_tags(method_name: str, spec: MethodSpec, seed: int) -> dict:
    """The tags that say which update rule and seed a run trains, for CLI, study and drop-in runs
    alike (MLflow stores every tag value as a string; readers parse the seed with ``int``)."""
    return {"grpolab.method": method_label(spec, method_name), "grpolab.method_base": method_name,
            "grpolab.spec_hash": spec.spec_hash(), "grpolab.seed": str(seed)}


def method_label(spec: MethodSpec, name: str, reference: MethodSpec | None = None) -> str:
    """The method a run actually trains: the registered method with this exact update rule if
    there is one (a DAPO ladder's last rung is ``dapo``), else ``name + <axes changed>`` relative
    to ``reference`` (a ladder's first rung) or to the registered method ``name``."""
    digest, registered = spec.spec_hash(), _registered_digests()
    if registered.get(name) == digest:
        return name
    for key, known in registered.items():
        if known == digest:
            return key
    if reference is None and name in METHODS and not METHODS[name].missing:
        reference = METHODS[name].spec()
    if reference is None:
        return name
    changed = [f"{f.name}={getattr(spec, f.name)}" for f in dataclasses.fields(spec)
               if getattr(spec, f.name) != getattr(reference, f.name)]
    return f"{name} + {', '.join(changed)}"[:250] if changed else name


_registered: dict = {}


def _registered_digests() -> dict[str, str]:
    """{method: spec hash} of every implemented registered method, in registry order. Built again
    only when an entry is added, removed or replaced (every run asks several times; building all
    specs costs ~0.1 s); an entry's axes are fixed once registered."""
    keys = tuple((key, id(method)) for key, method in METHODS.items())
    if _registered.get("keys") != keys:
        _registered.update(keys=keys, digests={key: method.spec().spec_hash()
                                               for key, method in METHODS.items() if not method.missing})
    return _registered["digests"]


def ladder_run_name(rung: int, rung_name: str, seed: int) -> str:
    return f"r{rung} {rung_name} · seed {seed}"


def standard_tags(git_commit: str) -> dict:
    """MLflow's own system tags, which the stock UI shows (source, commit, user)."""
    return {"mlflow.source.name": "grpolab", "mlflow.source.type": "LOCAL",
            "mlflow.source.git.commit": git_commit, "mlflow.user": _user()}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def state_relative(path, state) -> str:
    """``path`` as a path tag stores it: relative to the state folder when inside it."""
    from pathlib import Path
    try:
        return Path(path).resolve().relative_to(Path(state).resolve()).as_posix()
    except ValueError:   # outside the state folder: nothing to move with it
        return str(Path(path).resolve())


def resolve_path_tag(value: str, state):
    """A path tag read back against the state folder it is read from (an absolute value, as
    written before tags were relative, is returned as stored)."""
    from pathlib import Path
    path = Path(value)
    return path if path.is_absolute() else Path(state).resolve() / path


def clean_metric_name(name: str) -> str:
    """MLflow rejects '@' and '(' in metric names; 'pass@k' becomes 'pass_at_k'."""
    return name.replace("@", "_at_").replace("(", "_").replace(")", "_")


X_AXES = {"steps": "optimizer step", "tokens": "completion tokens generated (cumulative)",
          "seconds": "wall-clock seconds since the run's first logged point",
          "accelerator_hours": "accelerator-hours (processes x training wall seconds / 3600; CPU hours without a GPU)"}


TOKENS_METRIC = "tokens/cumulative"
