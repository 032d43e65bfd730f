"""TRL's basic training tests once per registered grpolab method (issue 25): the vendored test bodies, verbatim, with
their module's `GRPOTrainer` bound to `GrpoLabTrainer(method=<name>)`. Each asserts what TRL asserts of its own
trainer: training runs, logs a loss, and moves every parameter. A method that cannot act in these tests (TRL's tiny
random models, a reward model, no correctness source, no environment) is skipped with the reason, decided from its
axes, so a new method is covered (or skipped with a reason) without editing this file.

Collected only against GrpoLabTrainer (GRPOLAB_CONFORMANCE_TRAINER=grpolab): the stock run stays TRL's tests alone.
"""

import pytest
from trl_tests import test_grpo_trainer as vendored  # the module, not its classes: they must not be collected here
from trl_tests.conftest import force_use_cpu_without_accelerator  # noqa: F401  TRL's autouse fixture, for these tests too

from grpolab.method.advantages import ADVANTAGES
from grpolab.method.registry import METHODS

# (vendored test, its parameters): the two basic training tests on TRL's default tiny model, plain and chat-formatted
CASES = {
    "train-qwen2": ("test_train", {"model_id": "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5"}),
    "conversational": ("test_train_dataset_format", {"config_name": "conversational_prompt_only"}),
}


def cannot_act(name: str) -> str | None:
    """Why method `name` cannot act in TRL's training tests (None: it can), from its axes."""
    method = METHODS[name]
    if method.missing:
        return f"not implemented: {method.missing}"
    spec = method.spec()
    if spec.step_omega > 0 or spec.episode_norm != "episode":
        return ("needs a multi-turn environment (GiGPO's step-level advantage): TRL's training tests are single-turn "
                "(the trainer raises without a rollout_func that returns episodes)")
    if spec.positive_lm_coef > 0:
        return ("needs a correctness source (positive-example LM loss on correct completions): TRL's training tests "
                "score with a reward model and name none (the trainer raises without correctness=)")
    if ADVANTAGES[spec.advantage].components:
        return ("GDPO's decoupled advantage normalises each reward component on its own and needs at least 2: these "
                "tests score with one reward model (the trainer raises)")
    if ADVANTAGES[spec.advantage].tracker:
        return ("SPO's value tracker estimates a success probability and needs rewards in [0, 1]: these tests score "
                "with a reward model's unbounded logit (the trainer raises)")
    if spec.sampling == "gfpo":
        return (f"GFPO retains gfpo_keep={spec.gfpo_keep} of each group's completions: TRL's training tests sample 3 "
                "per prompt (the trainer raises; tests/test_sampling.py covers the refusal)")
    if spec.overlong_filter:
        return ("overlong filter: TRL's random tiny models never emit EOS within max_completion_length=8, so every "
                "completion is truncated and masked, no row is trained and no parameter can move (the trainer's "
                "empty-update guard warns; tests/test_dropin.py covers the filter and the guard)")
    return None


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", list(METHODS))
def test_training_per_method(method, case, tmp_path, monkeypatch):
    reason = cannot_act(method)
    if reason:
        pytest.skip(f"{method}: {reason}")
    from grpolab import GrpoLabTrainer

    class MethodTrainer(GrpoLabTrainer):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("method", method)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(vendored, "GRPOTrainer", MethodTrainer)
    test_name, params = CASES[case]
    instance = vendored.TestGRPOTrainer()
    instance.tmp_dir = str(tmp_path)   # what TrlTestCase's autouse fixture sets
    getattr(instance, test_name)(**params)
