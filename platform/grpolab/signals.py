"""Signals that end a run: kept apart from tracking so the CLI can import it without MLflow."""
import contextlib
import os
import signal
import sys
import threading


class RunKilled(BaseException):
    """Raised from the SIGTERM handler so the run ends KILLED, not FAILED or RUNNING."""


_received: list[int] = []


def signal_exception(signum: int) -> BaseException:
    """Ctrl-C (SIGINT) is a KeyboardInterrupt, as everywhere in Python; SIGTERM is RunKilled."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    job = os.environ.get("SLURM_JOB_ID")   # what a run's KILLED reason says of a worker in a Slurm job
    return RunKilled(f"received signal {signum}" + (f" in Slurm job {job} (the job was cancelled, preempted or "
                                                   "reached its time limit)" if job else ""))


def note_signal(signum: int) -> None:
    """Remember a termination signal. A handler's raise can be lost: inside a garbage-collection or
    weakref callback Python ignores it (and hands it to ``sys.unraisablehook``) and carries on, and
    a library may turn it into another error (Optuna's journal lock, interrupted while waiting,
    re-raises as RuntimeError "did not possess lock"). Safe points (a training step, an
    evaluation, between trials) call raise_if_signalled, and a trial that fails while a signal is
    pending is reported interrupted; inside signals_raise the ignored raise is kept quiet
    (quiet_unraisable)."""
    _received.append(signum)


def quiet_unraisable(previous):
    """An unraisable hook for signals_raise: the ignored raise of a noted signal (re-raised at the
    next safe point) is dropped while that signal is pending; everything else goes to
    ``previous``, the hook installed before (pytest's collector, a notebook's error reporter)."""
    def hook(unraisable) -> None:
        if not (_received and isinstance(unraisable.exc_value, (RunKilled, KeyboardInterrupt))):
            previous(unraisable)
    return hook


def signal_pending() -> bool:
    return bool(_received)


def forget_signals() -> None:
    """The signal's exception is being handled: a later safe point must not raise it again."""
    _received.clear()


def signal_behind(exc: BaseException | None) -> BaseException | None:
    """The signal's exception (KeyboardInterrupt, RunKilled) that ``exc`` was raised while handling,
    if any. An error made while unwinding from a signal (the store refusing the write that records
    the run KILLED) stands for the signal: what stopped the work is the signal, not that error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (KeyboardInterrupt, RunKilled)):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


STORE_LIBRARIES = ("sqlalchemy",)


def in_store_library(frame) -> bool:
    """Whether ``frame`` runs inside the database library, where a raise is not safe: SQLAlchemy
    dispatches a connection's ``commit`` event before its guarded DBAPI commit, and an exception
    raised there leaves the write transaction open in the connection pool (a SQLite store stays
    locked for every writer, this process's KILLED status included, until the process exits:
    tests/ground/test_signal_in_store.py). The store call returns in milliseconds, or after its own
    timeout, and the noted signal is raised at the next safe point."""
    while frame is not None:
        if (frame.f_globals.get("__name__") or "").partition(".")[0] in STORE_LIBRARIES:
            return True
        frame = frame.f_back
    return False


def raise_if_signalled(cause: BaseException | None = None) -> None:
    """Raise the pending signal's exception (from ``cause``, the error a library made of it)."""
    if _received:
        signum = _received[-1]
        _received.clear()
        raise signal_exception(signum) from cause


@contextlib.contextmanager
def signals_raise():
    """SIGTERM raises RunKilled and SIGINT KeyboardInterrupt in the main thread, so a worker or
    coordinator unwinds: its run ends KILLED and its trial is handed back, instead of dying with
    both left RUNNING. Both are noted first, so a raise that a library swallows or converts is
    raised again at the next safe point; a raise Python ignores (in a finaliser) is kept off the
    unraisable hook meanwhile. A SIGINT the process was started with ignored (nohup, a background
    job) stays ignored. Outside the main thread (``grpolab.run`` from a thread) Python cannot
    install handlers: nothing is installed and the process's own handlers stay in charge."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        note_signal(signum)
        if not in_store_library(frame):   # there it waits for the next safe point (in_store_library)
            raise signal_exception(signum)
    hook_before = sys.unraisablehook
    sys.unraisablehook = quiet = quiet_unraisable(hook_before)
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, handler)}
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except Exception as exc:
        raise_if_signalled(exc)   # a library turned the signal's raise into this error: it is still the signal
        raise
    else:
        raise_if_signalled()      # swallowed after the last safe point: this exit is the next one
    finally:
        try:
            _restore_handlers(previous)
        finally:
            if sys.unraisablehook is quiet:   # one the body installed since is its own to keep
                sys.unraisablehook = hook_before
            _forget_if_delivered(sys.exc_info()[1])


def _restore_handlers(previous: dict) -> None:
    """Put back the handlers signals_raise replaced, every one of them even when a signal lands
    meanwhile: signal.signal runs a pending handler (still signals_raise's) before it changes
    one, and that raise is re-raised once all are back."""
    delivered = None
    for signum, old in previous.items():
        while True:
            try:
                signal.signal(signum, old)
                break
            except (KeyboardInterrupt, RunKilled) as exc:
                delivered = exc
    if delivered is not None:
        raise delivered


def _forget_if_delivered(leaving: BaseException | None) -> None:
    """A signal's exception leaving signals_raise has been delivered: a caller that handles it (a
    notebook re-running grpolab.run) must not have it raised again at a later safe point. That
    holds wherever it was raised: in the body, at this exit, while the handlers were put back, or
    in contextlib's __exit__ before it resumed the generator (which is then closed: GeneratorExit)."""
    if isinstance(leaving, (KeyboardInterrupt, RunKilled, GeneratorExit)):
        forget_signals()
