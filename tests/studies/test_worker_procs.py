"""The coordinator's side of a multi-worker study: workers started before its set-up wait for
its word, and no path out of the coordinator leaves a worker running or a signal unraised."""

import signal
import subprocess
import sys
import time

import pytest
import yaml

from grpolab.studies.coordinator import _ticker
from grpolab.studies.storage import create_or_load
from grpolab.studies.definition import load_study
from grpolab.signals import RunKilled, forget_signals, note_signal
from grpolab.studies.processes import release, run_workers

# a stand-in worker process: it waits on stdin like a real one, reports what it read, then sleeps
# (a real worker imports torch for ~5 s first: these tests are about the processes, not rows)
WAITER = ("import sys, time; line = sys.stdin.readline().strip(); print('read', repr(line), flush=True); "
          "time.sleep(30 if line == 'go' else 0)")


def _waiters(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", WAITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)]


def test_released_workers_get_go_and_unreleased_ones_are_killed_before_touching_anything():
    told, untold = _waiters(2), _waiters(2)
    release(told, go=True)
    assert [p.stdout.readline().strip() for p in told] == ["read 'go'", "read 'go'"]
    assert all(p.poll() is None for p in told)   # they go on working
    release(untold, go=False)
    assert [p.returncode for p in untold] == [-signal.SIGKILL] * 2   # never got a word: killed at once
    release(told, go=True)   # a second word changes nothing for released workers
    assert all(p.poll() is None for p in told)
    release(told, go=False)  # ... but being called off stops them (the coordinator is leaving)
    assert all(p.returncode is not None for p in told)


def test_any_error_out_of_the_watch_stops_the_workers():
    """Review finding 1: only KeyboardInterrupt/RunKilled stopped them; a store error (or a signal
    Optuna's journal lock turned into RuntimeError) left them training after the coordinator left."""
    procs = _waiters(2)
    release(procs, go=True)
    calls = []

    def tick():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("Error: did not possess lock")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not possess lock"):
        run_workers(procs, tick)
    assert [p.poll() is not None for p in procs] == [True, True]
    assert time.monotonic() - started < 25   # stopped, not waited out (they sleep 30 s)


@pytest.fixture
def ladder_study(tmp_path):
    data = {"kind": "ladder", "name": "ticker", "base": {"method": {"base": "grpo"}, "task": {"name": "addition"},
                                                        "model": {"preset": "tiny"}},
            "budget": {"train.steps": 1}, "seeds": [0], "rungs": [{"name": "grpo"}]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    cfg = load_study(tmp_path / "s.yaml")
    return cfg, create_or_load(cfg, f"journal:{tmp_path / 'optuna.journal'}"), tmp_path


@pytest.mark.parametrize("store_error", [False, True])
def test_the_coordinators_tick_raises_a_signal_a_library_swallowed(ladder_study, store_error, monkeypatch):
    """Review finding 2: a SIGTERM whose raise a library swallowed (reap_logged logs store errors
    and goes on) or turned into RuntimeError ran the whole study to the end before it surfaced."""
    cfg, study, state = ladder_study
    lines = []
    tick = _ticker(study, cfg, state, 2, lines.append, f"journal:{state / 'optuna.journal'}")
    tick()   # nothing pending: a progress line, no raise
    assert len(lines) == 1
    if store_error:
        import grpolab.studies.coordinator as studies

        def converted(*args, **kwargs):
            raise RuntimeError("Error: did not possess lock")
        monkeypatch.setattr(studies, "progress", converted)
    note_signal(signal.SIGTERM)   # the handler ran; its raise was lost
    try:
        with pytest.raises(RunKilled) as raised:
            tick()
    finally:
        forget_signals()
    assert isinstance(raised.value.__cause__, RuntimeError) == store_error


def test_a_failed_set_up_kills_the_early_started_workers_before_they_touch_a_store(ladder_study, monkeypatch):
    """Workers start before the coordinator's set-up; when the set-up refuses the study (here a
    changed definition), they are killed and no trial is claimed."""
    import grpolab.studies.coordinator as coordinator
    from grpolab.errors import ConfigError
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    cfg, study, state = ladder_study
    study.set_user_attr("definition_hash", "made-from-another-definition")
    started = []
    real_start = coordinator.start_workers   # the name the coordinator calls
    monkeypatch.setattr(coordinator, "start_workers", lambda *a: started.extend(real_start(*a)) or started)
    with pytest.raises(ConfigError, match="different definition"):
        run_study(StudyRun.of(cfg.path, state,
                              storage_url=f"journal:{state / 'optuna.journal'}", workers=2, echo=lambda s: None))
    assert len(started) == 2 and [p.returncode for p in started] == [-signal.SIGKILL] * 2
    assert study.get_trials(deepcopy=False) == []


def test_validating_a_study_imports_no_torch():
    """A multi-worker coordinator validates every row's config while its workers import torch:
    it must not import torch itself (~3 s of the workers' 2 cores at every study start)."""
    code = ("import sys; from grpolab.studies.definition import load_study; import grpolab.studies.coordinator; "
            "import glob; from grpolab.planning import planning; "
            "exec('for p in sorted(glob.glob(\\'studies/*.yaml\\')):\\n    with planning(): load_study(p)'); "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules))")
    from pathlib import Path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_worker_bench_ratios_and_its_workload_are_the_main_jobs(tmp_path):
    """bench --what workers: ratios are 1-worker time / 2-worker time (medians), end to end and
    steady state; its study is the DAPO ladder's first rows/2 rungs x 2 seeds at the asked steps."""
    from grpolab.bench.workers import LADDER, _study_file, _summary
    from grpolab.errors import ConfigError
    measured = {"one_worker": {"wall": [60.0, 62.0, 58.0], "cpu": [100.0] * 3, "span": [50.0, 51.0, 49.0]},
                "one_worker_one_thread": {"wall": [70.0] * 3, "cpu": [70.0] * 3, "span": [62.0] * 3},
                "two_workers": {"wall": [40.0, 41.0, 39.0], "cpu": [78.0] * 3, "span": [31.0, 30.0, 32.0]}}
    out = _summary(measured, n_rows=8, steps=60, repeats=3, load_before=0.1)
    assert out["ratio_2_over_one_worker"] == 1.5 and out["steady_ratio_2_over_one_worker"] == round(50 / 31, 3)
    assert out["ratio_2_over_one_worker_one_thread"] == 1.75 and out["two_workers"]["rows_per_min"] == 12.0
    assert out["one_worker"]["busy_cores"] == round(100 / 60, 2) and out["rotations"] == 3
    ladder = yaml.safe_load(LADDER.read_text())
    study = yaml.safe_load(_study_file(tmp_path, "w", rows=6, steps=60).read_text())
    assert [r["name"] for r in study["rungs"]] == [r["name"] for r in ladder["rungs"][:3]]
    assert study["seeds"] == [0, 1] and study["budget"]["train.steps"] == 60
    assert study["base"]["train"] == ladder["base"]["train"]
    with pytest.raises(ConfigError, match="--rows: at most"):
        _study_file(tmp_path, "w", rows=2 * len(ladder["rungs"]) + 2, steps=60)


def test_a_store_hiccup_in_the_tick_does_not_stop_the_workers_until_it_persists(ladder_study, monkeypatch):
    """Review 5, finding 2: one failed progress read (no signal pending) used to end the watch, and
    the watch's error path stops every worker mid-row; now it is reported and only
    TICK_FAILURES failures in a row end the watch."""
    import grpolab.studies.coordinator as studies
    cfg, study, state = ladder_study
    lines, real, fails = [], studies.progress, {"left": 1}

    def flaky(*args, **kwargs):
        if fails["left"]:
            fails["left"] -= 1
            raise RuntimeError("server closed the connection unexpectedly")
        return real(*args, **kwargs)
    monkeypatch.setattr(studies, "progress", flaky)
    tick = _ticker(study, cfg, state, 2, lines.append, f"journal:{state / 'optuna.journal'}")
    tick()   # the hiccup: reported, no raise
    assert "store read failed" in lines[-1] and "1/5" in lines[-1]
    tick()   # the store is back: a progress line, and the count starts again
    assert "store read failed" not in lines[-1]
    fails["left"] = studies.TICK_FAILURES
    for _ in range(studies.TICK_FAILURES - 1):
        tick()
    with pytest.raises(RuntimeError, match="closed the connection"):
        tick()
