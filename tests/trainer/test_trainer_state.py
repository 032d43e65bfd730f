"""grpolab's trainer state: every stateful part gives its ``state_dict()`` and a fresh part that loads
it behaves as the original from there on; the trainer's one pair (``grpolab_state_dict``) goes
through the checkpoint file of either layout (an older file holds trainer attributes by name);
checkpoints.py reads no private attribute of the trainer."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from conftest import REPO, tiny_dataset
from grpolab.algorithms import ValueTracker
from grpolab.errors import ConfigError
from grpolab.experiment import checkpoints
from grpolab.method.spec import build_spec
from grpolab.trainer.critic import Critic
from grpolab.trainer.entropy_control import EntropyController
from grpolab.trainer.sampling import PromptDraws
from grpolab.trainer.step_times import RunCounters

CHECKPOINTS = REPO / "platform" / "grpolab" / "experiment" / "checkpoints.py"
TRL_OWN = {"_load_from_checkpoint", "_load_rng_state"}   # transformers' own Trainer methods


def _same(a, b) -> bool:
    """Nested state dicts equal, tensors element for element."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _through_a_file(state: dict, tmp_path: Path) -> dict:
    torch.save(state, tmp_path / "part.pt")
    return torch.load(tmp_path / "part.pt", weights_only=True)   # plain data: no pickled objects


def test_prompt_draws_continue_with_the_same_prompts(tmp_path):
    draws = PromptDraws(seed=3, rank=1)
    unused = PromptDraws(seed=3, rank=1).state_dict()   # no draw yet: the generator is made at the first one
    first = draws.draw(4, 100)
    again = PromptDraws(seed=3, rank=1)
    again.load_state_dict(_through_a_file(unused, tmp_path))
    assert torch.equal(again.draw(4, 100), first)
    fresh = PromptDraws(seed=3, rank=1)
    fresh.load_state_dict(_through_a_file(draws.state_dict(), tmp_path))
    assert torch.equal(fresh.draw(5, 100), draws.draw(5, 100))
    assert not torch.equal(PromptDraws(seed=3, rank=0).draw(4, 100), first)   # ranks draw different prompts


def test_entropy_controller_gives_the_same_next_coefficients(tmp_path):
    spec = build_spec({"entropy_mode": "adaptive_gated", "entropy_coef": 0.01, "entropy_target": 0.5,
                       "entropy_coef_step": 0.004, "entropy_coef_min": 0.0, "entropy_coef_max": 0.05})
    ctl = EntropyController(spec)
    for entropy in (0.3, 0.2, 0.9):
        ctl.update(entropy)
    fresh = EntropyController(spec)
    fresh.load_state_dict(_through_a_file(ctl.state_dict(), tmp_path))
    assert fresh.applied() == ctl.applied() == 0.0   # the last step's entropy (0.9) shuts the gate in both
    for entropy in (0.1, 0.4, 0.6):
        assert fresh.update(entropy) and ctl.update(entropy)
        assert (fresh.coef, fresh.applied()) == (ctl.coef, ctl.applied())
    assert ctl.coef == pytest.approx(0.01 + 0.004 + 0.004 - 0.004 + 0.004 + 0.004 - 0.004)
    assert math.isinf(EntropyController(spec).state_dict()["last_entropy"])


def test_value_tracker_gives_the_same_predictions(tmp_path):
    tracker = ValueTracker(0.9)
    tracker.update(["a", "b", "a"], torch.tensor([1.0, 0.0, 1.0]))
    fresh = ValueTracker(0.9)
    fresh.load_state_dict(_through_a_file(tracker.state_dict(), tmp_path))
    keys = ["a", "b", "unseen"]
    assert torch.equal(fresh.predict(keys), tracker.predict(keys))
    a = 0.9 * (0.9 * 1 + 1) + 1   # alpha of "a" after two successes from Beta(1, 1)
    assert float(tracker.predict(["a"])) == pytest.approx(a / (a + 0.9 * 0.9))
    for t in (tracker, fresh):
        t.update(keys, torch.tensor([0.0, 1.0, 1.0]))
    assert torch.equal(fresh.predict(keys), tracker.predict(keys))


def test_run_counters_continue_from_their_totals(tmp_path):
    """The empty-update streak too: a resumed run fails after max_empty_updates batches in a row
    counted across the interruption, as the undisturbed run does."""
    counters = RunCounters(cumulative_tokens=1234.0, device_seconds=56.5, empty_streak=3)
    fresh = RunCounters()
    fresh.load_state_dict(_through_a_file(counters.state_dict(), tmp_path))
    assert fresh == counters
    older = RunCounters()
    older.load_state_dict({"cumulative_tokens": 1.0, "device_seconds": 2.0})   # saved before the streak was kept
    assert older == RunCounters(1.0, 2.0, 0)


def _critic_step(critic: Critic, ids: torch.Tensor) -> None:
    """One optimizer step on a fixed regression target (AdamW's moments and step count change)."""
    values = critic.model(ids, torch.ones_like(ids), 3)
    (values - 1.0).pow(2).mean().backward()
    critic.optimizer.step()
    critic.optimizer.zero_grad(set_to_none=True)
    critic.micro_steps += 1


def test_critic_continues_with_the_same_values_and_steps(tiny_model_dir, tmp_path):
    ids = torch.randint(3, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    critic = Critic(str(tiny_model_dir), "cpu", lr=1e-2)
    for _ in range(2):
        _critic_step(critic, ids)
    fresh = Critic(str(tiny_model_dir), "cpu", lr=1e-2)
    fresh.load_state_dict(_through_a_file(critic.state_dict(), tmp_path))
    assert fresh.micro_steps == 2
    with torch.no_grad():
        assert torch.equal(fresh.model(ids, torch.ones_like(ids), 3), critic.model(ids, torch.ones_like(ids), 3))
    _critic_step(critic, ids)
    _critic_step(fresh, ids)   # the same step only when AdamW's moments came back too
    assert _same(fresh.model.state_dict(), critic.model.state_dict())


# -- the trainer's pair and the checkpoint file ------------------------------------------------
def _trainer(tiny_model_dir, tmp_path, method: str):
    from trl import GRPOConfig

    from grpolab.trainer.dropin import task_correctness
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    from grpolab.world.models import load_model
    task, train, ds = tiny_dataset(16)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, use_cpu=True, disable_tqdm=True, seed=0)
    _, tok = load_model(tiny_model_dir)
    return GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
                          args=args, train_dataset=ds, processing_class=tok, method=method,
                          correctness=task_correctness(task, train))


def _advance(trainer) -> None:
    """Move every part of a trainer away from its initial state, as training would."""
    trainer.counters.cumulative_tokens, trainer.counters.device_seconds, trainer.counters.empty_streak = 321.0, 7.25, 2
    trainer.entropy_control.coef, trainer.entropy_control.last_entropy = 0.02, 0.7
    trainer.prompt_draws.draw(3, len(trainer.train_dataset))
    if trainer.tracker is not None:
        trainer.tracker.update(["p", "q"], torch.tensor([1.0, 0.0]))
    if trainer.critic is not None:
        for p in trainer.critic.model.head.parameters():
            p.grad = torch.ones_like(p)
        trainer.critic.optimizer.step()
        trainer.critic.micro_steps = 3


def _flat_layout(trainer) -> dict:
    """The state file as grpolab wrote it while checkpoints.py read the trainer's attributes by name."""
    flat = {"cumulative_tokens": trainer.counters.cumulative_tokens, "device_seconds": trainer.counters.device_seconds,
            "entropy_coef_now": trainer.entropy_control.coef, "_last_entropy": trainer.entropy_control.last_entropy,
            "tracker": trainer.tracker, "_sampling_rng": trainer.prompt_draws.generator.get_state()}
    if trainer.critic is not None:
        flat.update(_critic_micro_steps=trainer.critic.micro_steps, critic=trainer.critic.model.state_dict(),
                    critic_opt=trainer.critic.optimizer.state_dict())
    return flat


@pytest.mark.parametrize("method", ["spo", "ppo"])   # the value tracker; the critic
def test_trainer_state_loads_from_either_layout_of_the_checkpoint_file(method, tiny_model_dir, tmp_path):
    saved, resumed = (_trainer(tiny_model_dir, tmp_path / name, method) for name in ("saved", "resumed"))
    assert (saved.tracker is not None, saved.critic is not None) == (method == "spo", method == "ppo")
    initial = resumed.grpolab_state_dict()
    _advance(saved)
    current, flat = tmp_path / "current", tmp_path / "flat"
    current.mkdir(), flat.mkdir()
    checkpoints.save_extra_state(saved, current)
    torch.save(_flat_layout(saved), flat / "grpolab_state.pt")
    for folder in (flat, current):
        resumed.load_grpolab_state_dict(initial)
        assert not _same(resumed.grpolab_state_dict(), saved.grpolab_state_dict())
        checkpoints.load_extra_state(resumed, folder)
        expected = saved.grpolab_state_dict()
        if folder is flat:   # that layout never held the empty-update streak: it resumes from the fresh 0
            expected["counters"]["empty_streak"] = initial["counters"]["empty_streak"]
        assert _same(resumed.grpolab_state_dict(), expected), folder.name
    n = len(resumed.train_dataset)
    assert torch.equal(resumed.prompt_draws.draw(4, n), saved.prompt_draws.draw(4, n))


def test_an_older_flat_file_without_a_later_key_keeps_the_fresh_value(tiny_model_dir, tmp_path):
    """device_seconds was saved only from 2026-11-28 on: a file from before resumes with the fresh
    trainer's value (as that layout's loader skipped a missing attribute), the rest restored."""
    saved, resumed = (_trainer(tiny_model_dir, tmp_path / name, "grpo") for name in ("saved", "resumed"))
    _advance(saved)
    flat = _flat_layout(saved)
    del flat["device_seconds"]
    (tmp_path / "old").mkdir()
    torch.save(flat, tmp_path / "old" / "grpolab_state.pt")
    fresh = resumed.counters.device_seconds
    checkpoints.load_extra_state(resumed, tmp_path / "old")
    assert resumed.counters.device_seconds == fresh
    assert resumed.counters.cumulative_tokens == saved.counters.cumulative_tokens
    assert resumed.entropy_control.state_dict() == saved.entropy_control.state_dict()


def test_a_state_file_that_does_not_fit_is_refused_in_one_line(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path / "spo", "spo")
    other = {**trainer.grpolab_state_dict(), "tracker": None}   # a run of a method without the tracker
    for name, content in (("unknown", {"weights": torch.zeros(2)}), ("other_method", {"grpolab_state_format": 2,
                                                                                    "state": other})):
        (tmp_path / name).mkdir()
        torch.save(content, tmp_path / name / "grpolab_state.pt")
        with pytest.raises(ConfigError, match="start a new run instead") as err:
            checkpoints.load_extra_state(trainer, tmp_path / name)
        assert "\n" not in str(err.value) and "grpolab_state.pt" in str(err.value)
    assert "had no tracker" in str(err.value)


# -- checkpoints.py keeps to the trainer's public state ----------------------------------------
def private_reads(source: str) -> list[str]:
    """Private attributes a module reads or writes (``x._name``, ``getattr(x, "_name")``), TRL's own
    methods and dunders aside, as 'line: name'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name = node.args[1].value
        if name and name.startswith("_") and not name.startswith("__") and name not in TRL_OWN:
            found.append(f"{node.lineno}: {name}")
    return found


def test_checkpoints_read_no_private_attribute_of_the_trainer():
    assert private_reads(CHECKPOINTS.read_text()) == []
    planted = "def f(trainer):\n    trainer._load_rng_state('x')\n    x = trainer._sampling_rng\n" \
              "    setattr(trainer, '_last_entropy', 1)\n    return type(x).__name__\n"
    assert private_reads(planted) == ["3: _sampling_rng", "4: _last_entropy"]
