"""Study kinds as types (grpolab.studies.kinds): every registered kind, a third one registered
here included, runs a 1-step study end to end on real Optuna and MLflow stores, and the layers
ask the kind object, not its name."""

import subprocess

import pytest
import yaml

from conftest import REPO, run_study_data
from grpolab.errors import ConfigError
from grpolab.studies.definition import load_study
from grpolab.studies.kinds import KINDS, kind_named, names_a_kind, register
from grpolab.studies.kinds.common import StudyCommon
from grpolab.studies.study_config import StudyConfig

BASE = {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "train": {"group_size": 4, "prompts_per_rollout": 2}, "eval": {"prompts": 4, "k": 1}}


class RepeatStudy(StudyCommon):
    """A toy kind: the base experiment once per seed, nothing sampled, nothing queued."""
    name = "repeat"

    def parse(self, data: dict, common: dict, path) -> StudyConfig:
        return StudyConfig(**common, n_trials=len(common["seeds"]))


# The cheapest study of each kind: one row of one optimizer step. A kind registered without an
# entry here fails the contract test.
TINY = {"ladder": {"rungs": [{"name": "base"}]},
        "search": {"space": {"train.learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True}},
                   "n_trials": 1, "sampler": {"name": "random", "seed": 0}},
        "repeat": {}}


@pytest.fixture
def repeat_kind():
    kind = register(RepeatStudy())
    yield kind
    del KINDS["repeat"]


def tiny_file(kind: str, name: str) -> dict:
    return {"kind": kind, "name": name, "base": BASE, "budget": {"train.steps": 1, "eval.every": 0}, "seeds": [0],
            "metric": "final:eval/pass_at_1", **TINY[kind]}


def test_every_registered_kind_runs_a_one_step_study(tmp_path, shared_state, repeat_kind):
    from grpolab.analysis.tidy import study_results
    from grpolab.report.tables import study_table
    from grpolab.studies.plan import plan_study, render_plan
    from grpolab.studies.rows import progress
    assert list(KINDS) == ["ladder", "search", "repeat"] and set(TINY) == set(KINDS)
    for name, kind in KINDS.items():
        cfg, study = run_study_data(tmp_path, tiny_file(name, f"kinds_{name}"), shared_state, f"{name}.yaml")
        assert cfg.study_kind is kind and kind.total_rows(cfg) == 1
        p = progress(study, cfg, 0.0, 1)
        assert (p["done"], p["total"], p["failed"], p["interrupted"]) == (1, 1, 0, 0), name
        assert not kind.pending(study, cfg) and kind.open_rows(study, cfg, p) == (0, [])
        tidy = study_results(study, cfg)
        assert len(tidy) == 1 and tidy.state.tolist() == ["COMPLETE"] and 0.0 <= tidy.value[0] <= 1.0, name
        table = study_table(cfg.path, shared_state, None, "markdown")
        assert f"kinds_{name}" in table and "final:eval/pass_at_1" in table, name
        plan = render_plan(plan_study(cfg.path))
        assert f"plan of {cfg.path}: {name} 'kinds_{name}'" in plan and "= 1 rows" in plan, plan


def test_the_toy_kind_is_a_study_of_trials(tmp_path, repeat_kind):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({**tiny_file("repeat", "r"), "seeds": [3, 5]}))
    cfg = load_study(path)
    assert (cfg.kind, cfg.n_trials, cfg.seeds, cfg.rungs) == ("repeat", 2, (3, 5), ())
    assert not repeat_kind.queued_rows and not repeat_kind.paired_rungs and repeat_kind.sampler(cfg) is None
    path.write_text(yaml.safe_dump({**tiny_file("repeat", "r"), "rungs": [{"name": "a"}]}))
    with pytest.raises(ConfigError, match="rungs: unknown key for a repeat study"):
        load_study(path)


def test_kinds_are_looked_up_by_name():
    assert [k.name for k in KINDS.values()] == ["ladder", "search"]
    assert kind_named("ladder").paired_rungs and kind_named("ladder").queued_rows
    assert kind_named("search").optuna_panels and not kind_named("search").paired_rungs
    assert names_a_kind("search") and not names_a_kind(["search"]) and not names_a_kind("grid")
    with pytest.raises(ConfigError, match=r"kind: expected ladder or search, got 'grid'"):
        kind_named("grid")


def test_no_layer_compares_a_kind_name():
    """Outside studies/kinds/ no module switches on the name of a kind."""
    found = subprocess.run(["grep", "-rnE", r"""kind\)? *(==|!=|in|not in) *[\(\["']*(ladder|search)|"""
                            r"""\((\"ladder\"|'ladder'), *(\"search\"|'search')""", str(REPO / "platform")],
                           capture_output=True, text=True).stdout.splitlines()
    assert [line for line in found if "/studies/kinds/" not in line] == []
