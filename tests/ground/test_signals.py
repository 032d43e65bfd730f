"""Ctrl-C/SIGTERM handling beyond the study tests: the safe points of a plain run, signals_raise
off the main thread, its unraisable hook, a signal landing while it exits, a row's claim and a NaN
objective (review 4 of the signal handling)."""

import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from transformers import TrainerCallback

from fault_helpers import BASE
from grpolab.studies.rows import row_states
from grpolab.signals import RunKilled, forget_signals, note_signal, signal_pending, signals_raise


@pytest.fixture(autouse=True)
def _nothing_pending():
    forget_signals()
    yield
    pending = signal_pending()
    forget_signals()
    assert not pending, "a noted signal was left pending"


class SwallowedCtrlC(TrainerCallback):
    """Notes SIGINT as the handler does before its raise is swallowed in a finaliser: before the
    first step, or at the end of the last one (after grpolab's own step-end callback)."""

    def __init__(self, when: str):
        self.when, self.begun = when, []

    def on_step_begin(self, args, state, control, **kwargs):
        self.begun.append(state.global_step)
        if self.when == "first step" and state.global_step == 0:
            note_signal(signal.SIGINT)

    def on_step_end(self, args, state, control, **kwargs):
        if self.when == "last step" and state.global_step == state.max_steps:
            note_signal(signal.SIGINT)


@pytest.mark.parametrize("when", ["first step", "last step"])
def test_a_plain_run_stops_at_its_next_safe_point_after_a_swallowed_ctrl_c(shared_state, when):
    """Review finding 3: a plain run (no study) trained on to the end, evaluated and saved the
    final model before a swallowed Ctrl-C surfaced. Now a step's end and an evaluation are safe
    points: no further step, no final eval, no final model, the run KILLED."""
    import grpolab
    from grpolab.tracking.recorder import tracking_uri
    swallow = SwallowedCtrlC(when)
    experiment = f"signals-{when.replace(' ', '-')}"
    with pytest.raises(KeyboardInterrupt):
        grpolab.run({**BASE, "name": "swallow", "tracking": {"experiment": experiment}}, state=shared_state,
                    callbacks=[swallow], train={**BASE["train"], "steps": 3})
    assert swallow.begun == ([0] if when == "first step" else [0, 1, 2])
    client = MlflowClient(tracking_uri(shared_state))
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.status == "KILLED"
    assert "grpolab.final_model" not in run.data.tags
    eval_steps = [m.step for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1")]
    assert eval_steps == [0]   # the warm start's eval only: none after the signal


def test_signals_raise_outside_the_main_thread_installs_nothing():
    """Review finding 4: grpolab.run from a thread raised ValueError ('signal only works in main
    thread'). Off the main thread nothing is installed and the body runs."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook, outcome = sys.unraisablehook, []

    def body():
        try:
            with signals_raise():
                outcome.append(sys.unraisablehook is hook)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion
            outcome.append(exc)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert outcome == [True]
    assert {s: signal.getsignal(s) for s in before} == before


def test_the_unraisable_hook_is_kept_and_used_for_everything_but_a_pending_signal(monkeypatch):
    """Review finding 5: noting a signal replaced sys.unraisablehook for good and sent other
    errors to sys.__unraisablehook__, past the hook installed before (pytest's, Sentry's)."""
    seen = []
    mine = seen.append
    monkeypatch.setattr(sys, "unraisablehook", mine)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    class CtrlCInFinaliser:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100_000))   # the handler runs here: Python hands its KeyboardInterrupt to the hook

    class BugInFinaliser:
        def __del__(self):
            raise ValueError("bug in a finaliser")

    with pytest.raises(KeyboardInterrupt):
        with signals_raise():
            CtrlCInFinaliser()
            time.sleep(0.1)
            BugInFinaliser()   # while the signal is pending: still the caller's hook's business
    assert [type(u.exc_value).__name__ for u in seen] == ["ValueError"]
    assert sys.unraisablehook is mine
    BugInFinaliser()
    assert [type(u.exc_value).__name__ for u in seen] == ["ValueError", "ValueError"]


class _KillWhileRestoring:
    """signal.signal as signals_raise sees it: SIGINT is sent to this process just before the
    first call that puts a handler back, as if Ctrl-C landed in signals_raise's finally."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(signal, name)

    def signal(self, signum, handler):
        self.calls += 1
        if self.calls == 3:   # two installs (SIGTERM, SIGINT), then the first restore
            os.kill(os.getpid(), signal.SIGINT)
        return signal.signal(signum, handler)


@pytest.mark.parametrize("where", ["while restoring the handlers", "before __exit__ resumed the generator"])
def test_a_signal_landing_as_signals_raise_exits_is_delivered_once_and_the_handlers_are_back(monkeypatch, where):
    """Review finding 10: a signal landing in contextlib's __exit__ or in the finally that puts
    the handlers back was noted but never forgotten (and, while restoring, left them installed)."""
    import grpolab.signals as tracking_signals
    signal.signal(signal.SIGINT, signal.default_int_handler)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if where == "while restoring the handlers":
        monkeypatch.setattr(tracking_signals, "signal", _KillWhileRestoring())
        with pytest.raises(KeyboardInterrupt):
            with signals_raise():
                pass
    else:
        context = signals_raise()
        context.__enter__()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)   # after the body, before __exit__ got to the generator
            time.sleep(5)
        del context   # the generator is closed (GeneratorExit): its finally runs
    assert not signal_pending()
    assert {s: signal.getsignal(s) for s in before} == before


def _ladder(tmp_path, name: str, objectives: list | None = None):
    from grpolab.studies.definition import load_study
    data = {"kind": "ladder", "name": name, "base": {**BASE, "eval": {"prompts": 2, "k": 1, "every": 0}},
            "budget": {"train.steps": 1}, "seeds": [0], "rungs": [{"name": "base"}],
            **({"objectives": objectives} if objectives else {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, load_study(path)


def test_a_claim_interrupted_before_its_heartbeat_is_handed_back_at_once(tmp_path, monkeypatch):
    """Review finding 8: a Ctrl-C (or a storage error) between study.ask() and the heartbeat left
    a RUNNING trial with no holder, re-queued only after the 120 s grace."""
    import grpolab.studies.trials as study_trials
    from grpolab.studies.storage import create_or_load
    from grpolab.studies.coordinator import enqueue_missing_rows
    _, cfg = _ladder(tmp_path, "claim")
    study = create_or_load(cfg, f"journal:{tmp_path / 'optuna.journal'}")
    assert enqueue_missing_rows(study, cfg, False) == []

    def interrupted(trial):
        raise KeyboardInterrupt
    monkeypatch.setattr(study_trials, "Heartbeat", interrupted)
    with pytest.raises(KeyboardInterrupt):
        study_trials.run_one_trial(study, cfg, tmp_path, "no-parent-run")
    [trial] = study.get_trials(deepcopy=False)
    assert (trial.state, trial.user_attrs.get("outcome")) == (TrialState.FAIL, "interrupted")
    assert row_states(study, cfg) == {"r0-s0": "INTERRUPTED"}
    enqueue_missing_rows(study, cfg, False)   # the next coordinator re-queues it
    assert len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) == 1


def test_a_sigterm_deferred_inside_the_claims_store_calls_hands_the_row_back_before_training(tmp_path, monkeypatch):
    """A SIGTERM that lands inside SQLAlchemy during study.ask() is only noted there
    (signals.in_store_library); the claim raises it before the row opens a run or trains, and the
    row is handed back, not left RUNNING until Slurm's KillWait ends in a SIGKILL."""
    import grpolab.studies.trials as study_trials
    from grpolab.studies.storage import create_or_load
    from grpolab.studies.coordinator import enqueue_missing_rows
    _, cfg = _ladder(tmp_path, "deferred")
    study = create_or_load(cfg, f"journal:{tmp_path / 'optuna.journal'}")
    enqueue_missing_rows(study, cfg, False)
    ask = study.ask

    def ask_then_noted(*args, **kwargs):
        trial = ask(*args, **kwargs)
        note_signal(signal.SIGTERM)   # what the handler does when the signal lands in a store call
        return trial
    monkeypatch.setattr(study, "ask", ask_then_noted)
    monkeypatch.setattr(study_trials, "_train_trial", lambda *a, **k: pytest.fail("the row trained"))
    try:
        with pytest.raises(RunKilled):
            study_trials.run_one_trial(study, cfg, tmp_path, "no-parent-run")
    finally:
        forget_signals()
    assert row_states(study, cfg) == {"r0-s0": "INTERRUPTED"}


def test_a_store_error_while_a_row_unwinds_from_sigterm_is_an_interruption(tmp_path, monkeypatch):
    """Found by the fault soak: a SIGTERMed worker whose run could not be recorded KILLED (the MLflow
    store answered "database is locked") reported its row failed with that error, which no rerun
    re-queues. An error raised while unwinding from the signal stands for the signal: the row is
    interrupted (re-queued), and the worker stops on the signal."""
    import grpolab.studies.trials as study_trials
    from grpolab.studies.storage import create_or_load
    from grpolab.studies.coordinator import enqueue_missing_rows
    _, cfg = _ladder(tmp_path, "unwinding")
    study = create_or_load(cfg, f"journal:{tmp_path / 'optuna.journal'}")
    enqueue_missing_rows(study, cfg, False)

    def killed_then_the_store_refuses(*args, **kwargs):
        try:
            raise RunKilled("received signal 15")
        except RunKilled:   # the run's KILLED status cannot be written
            raise RuntimeError("(sqlite3.OperationalError) database is locked") from None
    monkeypatch.setattr(study_trials, "_train_trial", killed_then_the_store_refuses)
    with pytest.raises(RunKilled, match="signal 15"):
        study_trials.run_one_trial(study, cfg, tmp_path, "no-parent-run")
    [trial] = study.get_trials(deepcopy=False)
    assert (trial.state, trial.user_attrs.get("outcome"), trial.user_attrs.get("error")) == (
        TrialState.FAIL, "interrupted", None)
    assert not signal_pending()
    enqueue_missing_rows(study, cfg, False)   # the next coordinator re-queues it
    assert len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) == 1


def test_a_nan_objective_makes_the_row_an_error_not_an_interruption(tmp_path, shared_state, monkeypatch):
    """Review finding 6: a NaN objective value was reported 'complete', Optuna failed the trial
    with a warning, and the row read as interrupted: re-queued by every later run of the study."""
    import grpolab.experiment.runner as runner
    from grpolab.studies.storage import create_or_load, default_storage
    from grpolab.studies.coordinator import enqueue_missing_rows, run_study
    from grpolab.studies.study_run import StudyRun
    real = runner._eval_metrics
    monkeypatch.setattr(runner, "_eval_metrics", lambda result: {**real(result), "eval/pass_at_1": math.nan})
    path, cfg = _ladder(tmp_path, "nan_objective", [{"metric": "final:eval/pass_at_1", "direction": "maximize"}])
    lines = []
    assert run_study(StudyRun.of(str(path), shared_state, workers=1, echo=lines.append)) == 1
    study = create_or_load(cfg, default_storage(shared_state))
    [trial] = study.get_trials(deepcopy=False)
    assert trial.state == TrialState.FAIL and trial.user_attrs["outcome"] == "error"
    assert "final:eval/pass_at_1 is NaN" in trial.user_attrs["error"]
    assert row_states(study, cfg) == {"r0-s0": "FAIL"}
    assert enqueue_missing_rows(study, cfg, False) == ["r0-s0"]   # failed, not interrupted: left, not re-queued
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert any("1 row(s) failed" in line for line in lines)


@pytest.mark.parametrize("in_main_thread", [True, False])
def test_a_store_error_made_of_a_signal_is_the_signal_in_reap_logged(tmp_path, monkeypatch, in_main_thread):
    """The coordinator's reap pass logged a Ctrl-C/SIGTERM that the store's code turned into an
    error as a hiccup ('trying again'). In the main thread it is the signal; the watchdog thread
    leaves it pending for the main thread's next safe point."""
    import grpolab.studies.hand_back as hand_back

    def converted(*args, **kwargs):
        raise RuntimeError("Error: did not possess lock")
    monkeypatch.setattr(hand_back, "reap_stale_trials", converted)
    note_signal(signal.SIGTERM)
    outcome = []

    def reap():
        try:
            hand_back.reap_logged(None, tmp_path, None, print)
            outcome.append(signal_pending())
        except RunKilled as exc:
            outcome.append(type(exc.__cause__).__name__)
    if in_main_thread:
        reap()
    else:
        thread = threading.Thread(target=reap)
        thread.start()
        thread.join()
        forget_signals()
    assert outcome == (["RuntimeError"] if in_main_thread else [True])


def test_a_store_error_made_of_a_signal_is_the_signal_when_a_restart_is_linked(shared_state):
    """link_restart logs a store error and goes on (the old run may be unreachable); one the
    store's code made of a SIGTERM is the signal."""
    from grpolab.studies.run_closing import link_restart
    note_signal(signal.SIGTERM)
    with pytest.raises(RunKilled) as raised:
        link_restart(shared_state, "no-such-run", "new-run")
    assert raised.value.__cause__ is not None and "no-such-run" in str(raised.value.__cause__)


def test_a_session_started_with_sigint_ignored_blames_no_test(tmp_path):
    """Review finding 11: pytest started with SIGINT ignored (nohup, a background job) had the
    first test blamed for it, and SIGINT un-ignored behind the session's back. The session is
    this conftest with one test that leaves signals alone."""
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_alone.py").write_text(
        "import signal\n\ndef test_alone():\n    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_alone.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 passed" in done.stdout and "ignored at the C level" not in done.stdout, done.stdout[-2000:]
