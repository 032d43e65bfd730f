"""`grpolab run` as a user sees it: a live bar on a terminal (a real pseudo-terminal), plain
progress lines on a pipe. A fast experiment: random rewards, no warm start, 6 steps."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time

import yaml

FAST = {"name": "progress", "seed": 0, "method": "grpo", "task": {"name": "random_reward", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "train": {"steps": 6, "group_size": 4, "prompts_per_rollout": 4, "learning_rate": 0.001},
        "eval": {"every": 3, "prompts": 8, "k": 2}}


def _experiment(tmp_path):
    path = tmp_path / "progress.yaml"
    path.write_text(yaml.safe_dump(FAST, sort_keys=False))
    return ["-m", "grpolab.cli", "--state", str(tmp_path / "state"), "run", str(path)]


def _run_on_pty(argv, columns: int) -> tuple[int, str]:
    """Run with stderr and stdout on a pseudo-terminal of ``columns`` columns; everything it drew."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.Popen([sys.executable, *argv], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks, deadline = [], time.time() + 500
    while time.time() < deadline:
        try:
            data = os.read(leader, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_run_on_a_terminal_draws_a_live_bar(tmp_path):
    code, screen = _run_on_pty(_experiment(tmp_path), columns=0)   # a pty reporting 0 columns (as `script` does)
    assert code == 0, screen[-2000:]
    frames = [f for f in screen.split("\r") if f.startswith("training:")]
    counts = {f.split("|")[-1].strip().split(" ")[0] for f in frames if "|" in f}
    assert {"0/6", "6/6"} <= counts and len(counts) >= 3, frames   # redrawn while it trains, not once at the end
    assert any("reward=" in f and "pass@1=" in f for f in frames), frames


def test_run_on_a_pipe_prints_progress_lines(tmp_path):
    done = subprocess.run([sys.executable, *_experiment(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("training: step")]
    assert [line.split(" · ")[0] for line in lines] == [f"training: step {s}/6" for s in range(7)], done.stderr
    assert "\r" not in done.stderr
    assert "reward" in lines[-1] and "pass@1" in lines[-1]
