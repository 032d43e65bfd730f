"""The command line as a user meets it: --version, global flags on either side of the
subcommand, `methods` readable in a terminal and safe in a pipe, bad input answered with one line
and exit 2 (a typo before anything heavy is imported), dashboards named after what they show."""

import os
import subprocess
import sys
import time

import pytest

from grpolab import __version__
from grpolab.cli import build_parser, hoist_global_flags, main
from grpolab.report.dashboard import default_output_name


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "grpolab.cli", *args], capture_output=True, text=True, timeout=300, **kw)


def test_version_and_typo_answer_without_heavy_imports():
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"grpolab {__version__}"
    start = time.perf_counter()
    typo = cli("stduy", "studies/x.yaml")
    seconds = time.perf_counter() - start
    assert typo.returncode == 2 and "invalid choice: 'stduy'" in typo.stderr
    print(f"typo answered in {seconds:.2f} s")          # reported, not enforced (see `grpolab bench --what cli`)
    probe = "import sys, grpolab.cli as c; c.build_parser(); print(sorted({'torch', 'trl', 'mlflow', 'transformers'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"


def test_global_flags_before_or_after_the_subcommand():
    parse = lambda argv: build_parser().parse_args(hoist_global_flags(argv))  # noqa: E731
    after = parse(["run", "exp.yaml", "--state", "/tmp/s", "train.steps=3", "-v", "seed=2"])
    assert after.state == "/tmp/s" and after.verbose and after.overrides == ["train.steps=3", "seed=2"]
    before = parse(["--state=/tmp/t", "table", "study.yaml", "--format", "latex"])
    assert before.state == "/tmp/t" and before.format == "latex" and not before.verbose
    assert parse(["methods"]).state is None


def test_methods_fits_a_terminal_and_names_papers():
    done = cli("methods")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and max(map(len, lines)) <= 110
    assert "seed 000" not in done.stdout and "arXiv:2402.03300" in done.stdout
    assert any(line.startswith("  clip_dapo (CLIP-DAPO): S. Roy, GRPO Variants") for line in lines)
    assert "| method" in cli("methods", "--markdown").stdout


def test_methods_into_a_closed_pipe_ends_quietly():
    piped = subprocess.run(f"{sys.executable} -m grpolab.cli methods | head -3", shell=True, capture_output=True,
                           text=True, timeout=120)
    assert len(piped.stdout.splitlines()) == 3 and "Traceback" not in piped.stderr and "Error" not in piped.stderr
    # Deterministic variant: the reader is gone before grpolab writes a byte.
    proc = subprocess.Popen([sys.executable, "-m", "grpolab.cli", "methods"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and stderr == ""


def test_broken_pipe_in_process(monkeypatch, capsys):
    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return sys.__stdout__.fileno()

    saved = os.dup(sys.__stdout__.fileno())
    try:
        monkeypatch.setattr(sys, "stdout", ClosedPipe())
        assert main(["methods"]) == 141
    finally:
        os.dup2(saved, sys.__stdout__.fileno())
        os.close(saved)


def test_unknown_run_id_is_one_line_exit_2(tmp_path):
    state = tmp_path / "state"
    done = cli("dashboard", "--runs", "0123456789abcdef", "--state", str(state))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: --state: no MLflow store in {state}")
    assert [p.name for p in state.rglob("*") if p.is_file()] == []     # reading wrote nothing: no store, no mark
    from grpolab.tracking.recorder import client_for
    client_for(state).search_experiments()                             # now a store exists (empty)
    done = cli("dashboard", "--runs", "0123456789abcdef", "--state", str(state))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: --runs: no MLflow run '0123456789abcdef'")


@pytest.mark.parametrize("args, name", [
    (("studies/dapo_table1.yaml", None, None), "dapo_table1.html"),
    (("studies/dapo_table1.yaml", None, "dashboards/length_and_entropy.yaml", "tokens", "lines"),
     "dapo_table1-length_and_entropy-tokens-seeds-lines.html"),
    ((None, ["aaaaaaaa1111", "bbbbbbbb2222"], None), "runs-aaaaaaaa-bbbbbbbb.html"),
    ((None, [f"{i:08d}ffff" for i in range(6)], None, "seconds"), "runs-00000000-00000001-00000002-00000003-and-2-more-seconds.html"),
])
def test_dashboard_files_are_named_after_what_they_show(args, name):
    assert default_output_name(*args) == name


def test_grpolab_warnings_print_as_one_line_and_others_keep_pythons_format(capsys):
    """On the command line grpolab's own warnings (any GrpoLabWarning, e.g. the dynamic-sampling round
    cap raised as a plain grpolab warning) are one ``warning: ...`` line; a library's warning keeps
    Python's ``file:line: Category: message`` format."""
    import warnings

    from grpolab import cli
    from grpolab.errors import EmptyUpdateWarning, GrpoLabWarning
    for category in (GrpoLabWarning, EmptyUpdateWarning):
        cli._show_warning(warnings.WarningMessage("round cap reached", category, "/x/grpo_trainer.py", 314).message,
                          category, "/x/grpo_trainer.py", 314)
    cli._show_warning(FutureWarning("old kwarg"), FutureWarning, "/lib/transformers/args.py", 7, line="")
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == ["warning: round cap reached", "warning: round cap reached"]
    assert err[2] == "/lib/transformers/args.py:7: FutureWarning: old kwarg"


@pytest.mark.parametrize("args, message", [
    (["study", "studies/dapo_table1.yaml", "--devices", "0,1"], "--devices: seeds on demand"),
    (["study", "studies/dapo_table1.yaml", "--accelerate-config", "nope.yaml"], "--accelerate-config: seeds on demand"),
    (["study", "studies/dapo_table1.yaml", "--until-decided", "--max-seeds", "32", "--batch", "0"],
     "--batch: must be >= 1, got 0"),
    (["study", "studies/dapo_table1.yaml", "--time-limit", "0"], "--time-limit: minutes, a finite number > 0, got 0.0"),
    (["study", "studies/dapo_table1.yaml", "--time-limit", "inf"], "--time-limit: minutes, a finite number > 0, got inf"),
    (["study", "studies/dapo_table1.yaml", "--fixed-seeds", "--launcher", "slurm", "--time-limit", "5"],
     "--time-limit: not with --launcher slurm"),
    (["verdicts", "--batch", "4"], "--max-seeds and --batch: only with --until-decided"),
    (["verdicts", "--until-decided", "--max-seeds", "32", "--batch", "0"], "--batch: must be >= 1, got 0"),
])
def test_a_flag_the_chosen_path_would_not_read_is_refused_not_ignored(tmp_path, capsys, args, message):
    """The seeds-on-demand path runs each row as one process here, and verdicts read --batch only
    when adding seeds: such a flag is answered, before any store exists, rather than left inert."""
    assert main(["--state", str(tmp_path / "state"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("flags", [["--workers", "2"], ["--table"], ["--fixed-seeds"], ["--launcher", "slurm"],
                                   ["--jobs", "2"], ["--until-decided", "--max-seeds", "32"], ["--time-limit", "13"]])
def test_plan_refuses_a_flag_only_running_reads(tmp_path, capsys, flags):
    assert main(["--state", str(tmp_path / "state"), "study", "studies/dapo_table1.yaml", "--plan", *flags]) == 2
    assert f"{flags[0]}: not with --plan" in capsys.readouterr().err


BENCH_REFUSED = [(["--what", "cli", "--rows", "4"], "--rows: not read by bench --what cli; only by --what workers or all"),
                 (["--what", "all", "--rollouts", "1"], "--rollouts: not read by bench --what all; only by --what throughput"),
                 (["--what", "workers", "--preset", "tiny"],
                  "--preset: not read by bench --what workers; only by --what tracking or trainer or all"),
                 (["--what", "cli", "--steps", "3"], "--steps: not read by bench --what cli; only by --what tracking"),
                 (["--what", "throughput", "--repeats", "2"],
                  "--repeats: not read by bench --what throughput; only by --what cli or tracking or trainer or workers or all"),
                 # a count the benchmark would run otherwise: cli's median of >= 3, workers' repeats/2 rotations
                 # and rows/2 rungs x 2 seeds
                 (["--what", "cli", "--repeats", "2"],
                  "--repeats 2: bench --what cli needs >= 3 (cli times the median of at least 3 runs)"),
                 (["--what", "workers", "--repeats", "3"], "--repeats 3: bench --what workers needs an even count "
                  "(workers runs repeats/2 rotations of its 3 configurations)"),
                 (["--what", "all", "--repeats", "3"], "--repeats 3: bench --what all needs an even count >= 4 (cli "
                  "times the median of at least 3 runs; workers runs repeats/2 rotations of its 3 configurations)"),
                 (["--what", "workers", "--rows", "9"], "--rows 9: bench --what workers needs an even count from 2 to "
                  "12 (rows/2 rungs of the ladder, 6 rungs, x 2 seeds)"),
                 (["--what", "all", "--rows", "14"], "--rows 14: bench --what all needs an even count from 2 to 12")]


@pytest.mark.parametrize("flags, message", BENCH_REFUSED)
def test_bench_refuses_a_flag_the_chosen_what_would_not_read(tmp_path, capsys, flags, message):
    """Each bench flag is read by some --what values only: given to another, it would be inert."""
    assert main(["--state", str(tmp_path / "state"), "bench", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "state").exists()


def test_bench_refusal_imports_nothing_heavy(tmp_path):
    """Refused before the benchmark's imports: one process answers every case without torch."""
    probe = ("import sys; from grpolab.cli import main; "
             f"codes = [main(['--state', {str(tmp_path)!r}, 'bench', *f]) for f, _ in {BENCH_REFUSED!r}]; "
             "print(codes, sorted({'torch', 'trl', 'mlflow', 'transformers'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == f"{[2] * len(BENCH_REFUSED)} []", done.stdout + done.stderr[-2000:]
    assert done.stderr.count("error: ") == len(BENCH_REFUSED)
