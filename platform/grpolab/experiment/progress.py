"""What `grpolab run` prints while it works (stderr, so stdout stays one JSON document); where its
run lives in MLflow is grpolab.tracking.location's."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

class TrainProgress(TrainerCallback):
    """Live progress over optimizer steps with the latest reward, entropy and held-out pass@1
    (``on_eval`` must be the run's ``eval_hook`` for the latter). On a terminal: a tqdm bar. On a
    pipe or file (a cluster log): one plain line about every tenth of the run, and at least every
    ``line_every_s`` seconds, since carriage-return redraws are unreadable there."""

    SHOWN = (("reward/mean", "reward"), ("entropy", "entropy"), ("eval/pass_at_1", "pass@1"))
    FALLBACK_COLUMNS = 100   # a pseudo-terminal that reports 0 columns (script, some CI runners)

    def __init__(self, stream=None, line_every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.bar, self.latest, self.line_every_s = None, {}, line_every_s
        self.evaluated = False   # the step-0 eval runs before the bar exists; it is shown on the bar
        self.started = self.last_line = 0.0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = self.last_line = time.monotonic()
        if not self.tty:
            self._line(state.global_step, state.max_steps)
            return
        from tqdm.auto import tqdm
        columns = self._columns()
        self.bar = tqdm(total=state.max_steps, desc="training", unit="step", file=self.stream,
                        ncols=columns or self.FALLBACK_COLUMNS, dynamic_ncols=columns > 0, mininterval=0.5)

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key, short in self.SHOWN:
            if isinstance((logs or {}).get(key), (int, float)):
                self.latest[short] = f"{logs[key]:.3g}"

    def on_eval(self, step: int, metrics: dict) -> None:
        """The run's eval hook: held-out results are not TRL logs (grpolab evaluates between
        steps), so they reach the bar here. After training the bar is closed: print a line."""
        value = metrics.get("eval/pass_at_1")
        if not isinstance(value, (int, float)):
            return
        self.latest["pass@1"] = f"{value:.3g}"
        if self.bar is not None:
            self.bar.set_postfix(self.latest)
        elif self.evaluated:
            print(f"held-out pass@1 at step {step}: {value:.3g}", file=self.stream, flush=True)
        self.evaluated = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.set_postfix(self.latest, refresh=False)
            self.bar.update(state.global_step - self.bar.n)
            return
        every = max(1, state.max_steps // 10)
        now = time.monotonic()
        if state.global_step % every == 0 or now - self.last_line >= self.line_every_s:
            self._line(state.global_step, state.max_steps)

    def _columns(self) -> int:
        """The bar's terminal width (stderr's, not stdout's: stdout may be piped); 0 if unknown."""
        try:
            return int(os.environ.get("COLUMNS") or os.get_terminal_size(self.stream.fileno()).columns)
        except (OSError, ValueError, AttributeError):
            return 0

    def _line(self, step: int, total: int) -> None:
        self.last_line = time.monotonic()
        shown = "".join(f" · {k} {v}" for k, v in self.latest.items())
        print(f"training: step {step}/{total}{shown} · {self.last_line - self.started:.0f}s", file=self.stream,
              flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        print("final held-out evaluation ...", file=self.stream, flush=True)
