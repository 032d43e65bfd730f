"""grpolab: an experiment-tracking ablation platform for the GRPO family of RL algorithms.

Public names (``grpolab.__all__``) are imported on first use (PEP 562 ``__getattr__``), so
``import grpolab`` -- and every command-line answer -- stays free of torch, TRL and MLflow:
    run(experiment, **overrides) -> RunOutcome      train one experiment (YAML path or dict)
    load(experiment, **overrides) -> RunConfig      the same validation, without training
    study(path, workers=1) -> StudyOutcome          run or resume a ladder or search
    results(study) -> DataFrame                     tidy rows: rung, seed, step, metric, value, run_id
    curves(run_ids, metrics=None) -> DataFrame      MLflow histories in the same tidy shape
    tiny_model(directory) -> str                    a tiny random local model + tokenizer (no hub)
    GrpoLabTrainer                                  the TRL GRPOTrainer subclass every run trains with
    ConfigError                                     bad input (a ValueError naming the key)
"""

__version__ = "0.1.0"

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "run": "api", "load": "api", "study": "api", "results": "api", "curves": "api",
    "tiny_model": "api", "RunOutcome": "api", "StudyOutcome": "api",
    "GrpoLabTrainer": "trainer.grpo_trainer",
    "ConfigError": "errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'grpolab' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value   # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
