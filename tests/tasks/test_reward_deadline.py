"""A reward's ``timeout_s`` holds whatever the reward does with the process alarm: real
math-verify (whose own timeout installs a SIGALRM handler and cancels the alarm on return),
rewards that swallow exceptions, rewards called from another thread."""

import signal
import threading
import time

import math_verify
import pytest

from grpolab.tasks.deadline import deadline
from grpolab.tasks.rewards import Reward, RewardTimeout, call_user

ARGUMENTS = {"prompt": "p", "completion": "\\boxed{1/2}", "answer": "0.5", "extracted": "1/2", "meta": {},
             "completion_length": 3}
VERIFIED = []


def verify_then_sleep(*, completion, answer, **kwargs):
    """What a user reward commonly does: grade with math-verify (its parse and verify each set
    ``signal.alarm`` and cancel it on return), then do more work that hangs."""
    VERIFIED.append(math_verify.verify(math_verify.parse(answer), math_verify.parse(completion)))
    time.sleep(5)
    return 1.0


def swallow_everything(**kwargs):
    try:
        time.sleep(5)
    except BaseException:   # noqa: BLE001 - a reward that hides every interruption
        pass
    return 1.0


def busy_python(**kwargs):
    end = time.monotonic() + 5
    while time.monotonic() < end:
        pass
    return 1.0


def quick(*, completion, answer, **kwargs):
    return float(math_verify.verify(math_verify.parse(answer), math_verify.parse(completion)))


def reward(function, timeout_s=0.5) -> Reward:
    return Reward(name=f"my_rewards:{function.__name__}", label=function.__name__, timeout_s=timeout_s,
                  function=function)


def test_the_limit_survives_a_reward_that_calls_math_verify():
    VERIFIED.clear()
    alarm_handler = signal.getsignal(signal.SIGALRM)
    with pytest.raises(RewardTimeout, match=r"^reward 'verify_then_sleep' ran longer than its timeout_s 0.5 s$"):
        call_user(reward(verify_then_sleep), ARGUMENTS)
    assert VERIFIED == [True]   # math-verify ran (and graded) before the hang
    assert signal.getsignal(signal.SIGALRM) is alarm_handler
    assert signal.alarm(0) == 0   # no alarm left armed


def test_a_reward_in_time_returns_its_value_and_leaves_no_handler_behind():
    from grpolab.tasks.deadline import DEADLINE_SIGNAL
    before = signal.getsignal(DEADLINE_SIGNAL)
    assert call_user(reward(quick, timeout_s=30), ARGUMENTS) == 1.0
    assert call_user(reward(quick, timeout_s=30), {**ARGUMENTS, "completion": "\\boxed{2}"}) == 0.0
    assert signal.getsignal(DEADLINE_SIGNAL) is before


def test_a_reward_that_swallows_the_interruption_still_times_out():
    with pytest.raises(RewardTimeout, match="reward 'swallow_everything' ran longer than its timeout_s 0.3 s "
                                            r"\(and swallowed the interruption\)"):
        call_user(reward(swallow_everything, timeout_s=0.3), ARGUMENTS)


def test_outside_the_main_thread_python_code_is_interrupted():
    outcome = {}

    def run():
        try:
            outcome["value"] = call_user(reward(busy_python, timeout_s=0.3), ARGUMENTS)
        except RewardTimeout as exc:
            outcome["error"] = str(exc)
        outcome["after"] = call_user(reward(pass_through, timeout_s=30), ARGUMENTS)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert outcome == {"error": "reward 'busy_python' ran longer than its timeout_s 0.3 s", "after": 2.0}


def pass_through(**kwargs):
    time.sleep(0.5)   # nothing of the previous call's interruption is left to stop this one
    return 2.0


def interrupted_then_cleanup(injection: str) -> str:
    """A script where a Ctrl-C handler's exception lands while a 0.3 s limit is being armed or
    stopped, then cleanup sleeps past the limit: the timer left running must not end the process."""
    return f"""
import threading, time
from grpolab.tasks import deadline as D
{injection}
try:
    with D.deadline(0.3, "r"):
        pass
except KeyboardInterrupt:
    print("caught", flush=True)
time.sleep(1)
print("survived")
"""


AFTER_TIMER_START = """
start = threading.Timer.start
def start_then_interrupt(self):
    start(self)
    threading.Timer.start = start
    raise KeyboardInterrupt
threading.Timer.start = start_then_interrupt
"""
AT_STOP = """
stop = D._Watch.stop
def interrupt_stop(self):
    D._Watch.stop = stop
    raise KeyboardInterrupt
D._Watch.stop = interrupt_stop
"""


@pytest.mark.parametrize("injection", [AFTER_TIMER_START, AT_STOP], ids=["after_timer_start", "at_stop"])
def test_a_timer_left_running_by_an_interruption_does_not_end_the_process(injection):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", interrupted_then_cleanup(injection)], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout.split()) == (0, ["caught", "survived"]), done.stderr


def test_an_inner_deadline_keeps_the_outer_limit():
    finished = []
    with pytest.raises(RewardTimeout, match=r"^outer ran longer than its timeout_s 0.3 s$"):
        with deadline(0.3, "outer"):
            with deadline(30, "inner"):
                time.sleep(3)
                finished.append("inner body")
    assert finished == []


def test_an_inner_deadline_keeps_the_outer_limit_outside_the_main_thread():
    outcome = {}

    def run():
        try:
            with deadline(0.3, "outer"):
                with deadline(30, "inner"):
                    busy_python()
        except RewardTimeout as exc:
            outcome["error"] = str(exc)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert outcome == {"error": "outer ran longer than its timeout_s 0.3 s"}

