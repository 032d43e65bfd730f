"""``grpolab.study`` from Python runs through the command line's own study command (the same
checks, then the same ``execute``): seeds on demand (``until_decided``) plan and run their looks
as ``grpolab study --until-decided`` does, and the launch choices (Slurm, devices per row) are
refused with the command line's messages before anything is written."""

from __future__ import annotations

import pytest
import yaml

import grpolab
from conftest import tiny_two_rung_ladder
from grpolab.errors import ConfigError


@pytest.mark.slow
def test_until_decided_from_python_plans_and_runs_the_looks(tmp_path, shared_state, capsys):
    """A 2-seed ladder, one seed per look up to 3: the looks at 2 and 3 seeds are planned and kept
    with the study (each at level 1 - 0.05/2), look 1 runs the 4 first rows, and progress goes to
    stderr only (stdout stays the caller's)."""
    from grpolab.analysis.ablation import load_results
    from grpolab.studies.storage import SEQUENTIAL_ATTR
    path = tmp_path / "api_until_decided.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="api_until_decided", seeds=[0, 1])))
    outcome = grpolab.study(path, state=shared_state, workers=1, until_decided=True, max_seeds=3, batch=1)
    out, err = capsys.readouterr()
    assert outcome.complete and outcome.name == "api_until_decided" and outcome.parent_run_id
    assert "look 1/2 at 2 seeds (per-look level 97.5 %)" in err and "look 1/2" not in out
    cfg, study = load_results(str(path), shared_state, None)
    assert study.user_attrs[SEQUENTIAL_ATTR]["looks"] == [2, 3]
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert 4 <= len(done) <= 6 and set(cfg.seeds) <= {0, 1, 2}
    frame = outcome.results()
    assert set(frame.rung_name) == {"a", "b"} and frame.seed.max() <= 2


@pytest.mark.parametrize("kwargs, message", [
    ({"until_decided": True}, "--until-decided needs --max-seeds N"),
    ({"max_seeds": 4}, "--max-seeds and --batch: only with --until-decided"),
    ({"fixed_seeds": True, "until_decided": True, "max_seeds": 4}, "--fixed-seeds: not with --until-decided"),
    ({"until_decided": True, "max_seeds": 4, "launcher": "slurm"}, "--launcher slurm: not with --until-decided yet"),
    ({"until_decided": True, "max_seeds": 4, "gpus_per_row": 2}, "--gpus-per-row: not with --until-decided yet"),
    ({"slurm": {"jobs": 2}}, "--jobs: only with --launcher slurm"),
    ({"launcher": "slurm", "slurm": {"jobz": 2}}, "slurm: unknown option 'jobz'"),
    ({"launcher": "kubernetes"}, "launcher: unknown launcher 'kubernetes'; valid: local, slurm"),
    ({"launcher": "slurm", "slurm": {"params": ["gres"]}}, "--slurm-param"),
    ({"table": True}, "grpolab.study: unknown keyword 'table'; valid: progress, state, storage, workers"),
])
def test_bad_study_choices_are_refused_before_anything_is_written(tmp_path, kwargs, message):
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="refused")))
    with pytest.raises(ConfigError, match=message):
        grpolab.study(path, state=tmp_path / "state", **kwargs)
    assert not (tmp_path / "state").exists()


def test_a_file_designed_for_seeds_on_demand_runs_them_unless_fixed_seeds(tmp_path):
    """The file's seeds: {first, batch, cap} design is the plan by default; launching its rows
    on devices per row needs fixed_seeds, as on the command line."""
    path = tmp_path / "designed.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="designed", seeds={"first": 2, "batch": 1, "cap": 3})))
    with pytest.raises(ConfigError, match="add --fixed-seeds to launch the first seeds with Slurm or --gpus-per-row"):
        grpolab.study(path, state=tmp_path / "state", gpus_per_row=1)
    assert not (tmp_path / "state").exists()


def test_slurm_from_python_refuses_storage_the_jobs_cannot_share(tmp_path):
    """launcher="slurm" reaches the same launcher checks as `--launcher slurm`: SQLite is refused
    before any job is submitted or any storage is made."""
    path = tmp_path / "slurm_api.yaml"
    path.write_text(yaml.safe_dump(tiny_two_rung_ladder(name="slurm_api")))
    with pytest.raises(ConfigError, match="--launcher slurm: the jobs need a storage they all reach: PostgreSQL"):
        grpolab.study(path, state=tmp_path / "state", launcher="slurm", slurm={"jobs": 2, "setup": ["true"]},
                      storage=f"sqlite:///{tmp_path}/optuna.db")
    assert not (tmp_path / "optuna.db").exists()
