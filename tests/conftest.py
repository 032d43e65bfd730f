import gc
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("MLFLOW_TRACKING_URI", None)  # tests always use their own embedded store
warnings.filterwarnings("ignore", category=FutureWarning)
# Under pytest-xdist (`make test`: -n $(TEST_WORKERS)) each test process gets its share of the cores (at least one), and so do
# the processes it starts (they read OMP_NUM_THREADS when torch loads): two 2-thread torch pools
# on 2 cores spin against each other (measured: suite 19.4 min with -n 2 vs 13.2 serial).
# GRPOLAB_TEST_CORES: the cores this pytest session shares out (`make test` runs the conformance
# suite beside the main one, each session with its part of the machine); default all of them.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") or os.environ.get("GRPOLAB_TEST_CORES"):
    _cores = int(os.environ.get("GRPOLAB_TEST_CORES") or os.cpu_count() or 1)
    _share = str(max(1, _cores // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = _share

REPO = Path(__file__).resolve().parents[1]
# Tests exercise this checkout, in-process and in the subprocesses they start, whatever the
# editable install points at (running CI in another clone re-points `pip install -e`).
sys.path.insert(0, str(REPO / "platform"))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "platform"), os.environ.get("PYTHONPATH")]))

from grpolab.startup import IMPORT_THRESHOLDS, freeze_what_lives, imported_since_freeze  # noqa: E402  (the path above)

# Test files sit in one folder per floor (tests/method, tests/studies, ...), their helper modules here
# (pytest puts this folder on sys.path for this conftest). A test file may import another one's helpers
# by its module name (`from test_engines import two_steps`; basenames are unique), so every floor
# folder is importable whichever file runs first or alone. The vendored conformance suite is left out.
TESTS = Path(__file__).resolve().parent
for _floor in sorted({p.parent for p in TESTS.glob("*/test_*.py")} - {TESTS / "conformance"}):
    if str(_floor) not in sys.path:
        sys.path.append(str(_floor))

# As a command-line process runs it while importing, for the whole session: test processes keep importing
# (each test file's lazily loaded libraries) and keep long-lived state (stores, caches, warm starts).
gc.set_threshold(*IMPORT_THRESHOLDS)


def pytest_collection_finish(session):
    """Move what collection imported (torch, transformers, TRL, mlflow: ~5*10^5 objects) out of the cyclic
    collector's reach. Every `Trainer.train()` (accelerate's free_memory) and TRL's own per-test cleanup fixture
    run a full `gc.collect()`, which otherwise walks all of it each time: ~0.3 s a call, twice per conformance
    test. Objects the tests create are still collected; the frozen ones are module state that lives to the end."""
    freeze_what_lives()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Freeze once more, at the end of the first test module that imported more: the first training test
    loads TRL's trainer, datasets and MLflow's store, ~1.5*10^5 objects that each later full collection
    walked (0.09 s a `train()`; test_contract's 40 methods: 4.4 CPU-s of collection before, 0.4 after).
    Collected first, once the module's own objects are released (its last test's fixtures, module-scoped
    ones included), so nothing of a test is frozen; not after a failure, whose traceback keeps its frames
    alive (sys.last_traceback); once only, so what a later module holds is never frozen past it."""
    yield
    module_ends = nextitem is None or nextitem.module is not item.module
    if (module_ends and not _refrozen and getattr(sys, "last_traceback", None) is None
            and imported_since_freeze() >= REFREEZE_AFTER_MODULES):
        freeze_what_lives()
        _refrozen.append(item.nodeid)


_refrozen: list[str] = []
# modules imported since the last freeze that make a test process freeze again: the sign its long-lived state grew
REFREEZE_AFTER_MODULES = 20


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A randomly initialised tiny preset saved to disk (TRL re-loads the reference from it)."""
    from grpolab.world.models import build_model, save_model
    path = tmp_path_factory.mktemp("tiny-model")
    save_model(*build_model("tiny", 0), path)
    return path


def session_models_dir(tmp_path_factory) -> Path:
    """One model cache for the whole test session, every xdist worker included (their base temps
    share a parent): a warm start is minutes of SFT on a CPU, and each worker (and each test with a
    state folder of its own) would otherwise train the same one again. The cache is made for
    concurrent users: a warm start trains under a file lock and the others load it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "session-models"
    path.mkdir(exist_ok=True)
    return path


def built_once(tmp_path_factory, name: str, build) -> tuple[Path, dict]:
    """(folder, result) of ``build(folder) -> JSON-able dict``, run once per test session however many
    xdist workers ask: the first builds under a file lock in the folder the workers share (see
    session_models_dir) and records the result as JSON; the others wait for it and read it. For a
    costly module fixture whose tests worksteal may split between workers.
    A build that raises is recorded too: every worker then fails with its traceback, not with what a
    second build in the half-filled folder would raise."""
    import traceback
    from filelock import FileLock
    folder = session_models_dir(tmp_path_factory).parent / f"built-{name}"
    folder.mkdir(exist_ok=True)
    result = folder.with_name(folder.name + ".json")
    with FileLock(str(folder) + ".lock"):
        if not result.exists():
            try:
                recorded = {"result": build(folder)}
            except Exception:
                recorded = {"error": traceback.format_exc()}
            partial = result.with_suffix(".partial")
            partial.write_text(json.dumps(recorded))
            os.replace(partial, result)   # a reader sees the whole record or none
    recorded = json.loads(result.read_text())
    if "error" in recorded:
        pytest.fail(f"building {name} once for the session failed:\n{recorded['error']}")
    return folder, recorded["result"]


def share_models(state: Path, tmp_path_factory) -> Path:
    """Point ``state``'s model cache at the session's (see session_models_dir); returns ``state``."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "models").symlink_to(session_models_dir(tmp_path_factory), target_is_directory=True)
    return state


@pytest.fixture(scope="session")
def shared_state(tmp_path_factory):
    """One state folder for the session, so the warm start is trained once and reused."""
    path = own_state(tmp_path_factory, "state")
    os.environ["GRPOLAB_STATE"] = str(path)
    return path


def own_state(tmp_path_factory, prefix: str) -> Path:
    """A fresh state folder sharing the session's model cache, its stores made before any test's
    subprocess and reader race to create them."""
    from grpolab.tracking.stores import prepare_stores
    path = share_models(tmp_path_factory.mktemp(prefix), tmp_path_factory)
    prepare_stores(path)
    return path


def tiny_two_rung_ladder(**fields) -> dict:
    """A ladder of two 1-step rungs on the tiny preset without a warm start (seconds a row):
    rung b changes the learning rate. ``fields`` add or replace top-level keys (name, seeds, ...)."""
    return {"kind": "ladder", "metric": "final:eval/pass_at_1", "smallest_effect": 0.05,
            "base": {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
                     "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
                     "train": {"group_size": 4, "prompts_per_rollout": 2}, "eval": {"prompts": 4, "k": 1}},
            "budget": {"train.steps": 1, "eval.every": 0},
            "rungs": [{"name": "a"}, {"name": "b", "changes": {"train.learning_rate": 0.003}}], **fields}


def run_study_data(folder, data: dict, state, file_name: str = "study.yaml"):
    """Write ``data`` as a study file in ``folder``, run it with one in-process worker (it must
    exit 0) and return (config, study) as the tables read them."""
    import yaml
    from grpolab.analysis.ablation import load_results
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    path = Path(folder) / file_name
    path.write_text(yaml.safe_dump(data))
    assert run_study(StudyRun.of(str(path), state, workers=1, echo=lambda s: None)) == 0
    return load_results(str(path), state, None)


def write_sums(path: Path, n: int = 40) -> Path:
    """A local ``.jsonl`` dataset of ``n`` doubling sums (``"3+3="`` -> ``"6"``) at ``path``."""
    import json
    path.write_text("\n".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(n)))
    return path


def tiny_dataset(n=64):
    import datasets
    from grpolab.world.generated import make_task
    task = make_task("addition", digits=2)
    train, _ = task.splits(0, n, 8)
    return task, train, datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})


class PostgresServer:
    """A real PostgreSQL server on 127.0.0.1 (trust auth, user grpolab); ``database(name)``
    creates a fresh database and returns its SQLAlchemy URL."""

    def __init__(self, port: int):
        self.port = port

    def url(self, name: str) -> str:
        return f"postgresql+psycopg2://grpolab@127.0.0.1:{self.port}/{name}"

    def database(self, name: str) -> str:
        import psycopg2
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="grpolab", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return self.url(name)


def _start_on_a_free_port(as_pg: list, bin_dir: Path, data: Path, sock: Path, log: Path, tries: int = 5) -> int:
    """Start the server on a port the kernel just gave out. Another process (a parallel test
    session) may take that port before the server binds it: then the start fails and another
    port is tried."""
    for _ in range(tries):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        started = subprocess.run(as_pg + [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o",
                                          f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections=200",
                                          "start"], capture_output=True, text=True)
        if started.returncode == 0:
            return port
    raise RuntimeError(f"PostgreSQL did not start on a free port in {tries} tries: {started.stdout}{started.stderr}"
                       f"{log.read_text()[-2000:] if log.exists() else ''}")


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server started on 127.0.0.1 for the session, then stopped."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        pytest.fail("PostgreSQL is not installed: `make test` installs it (apt-get install postgresql)")
    bin_dir = Path(bins[-1])
    root = Path(tempfile.mkdtemp(prefix="grpolab-pg-"))  # pytest's tmp dirs are 0700 root: postgres can't enter
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_pg:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    subprocess.run(as_pg + [str(bin_dir / "initdb"), "-D", str(data), "-U", "grpolab", "--auth=trust"], check=True,
                   capture_output=True)
    port = _start_on_a_free_port(as_pg, bin_dir, data, sock, root / "log")
    yield PostgresServer(port)
    subprocess.run(as_pg + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url(postgres_server):
    """A fresh database on the session's PostgreSQL server for Optuna studies."""
    return postgres_server.database("optuna")


@pytest.fixture
def own_postgres():
    """(SQLAlchemy URL, pg_ctl(*args), port, socket folder) of a fresh PostgreSQL server on 127.0.0.1 for
    one test, which may stop and start it (the session's server is shared by other tests)."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        pytest.fail("PostgreSQL is not installed: `make test` installs it (apt-get install postgresql)")
    bin_dir, root = Path(bins[-1]), Path(tempfile.mkdtemp(prefix="grpolab-pg-restart-"))
    data, sock, log = root / "data", root / "sock", root / "log"
    sock.mkdir()
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    for path in (root, sock) if as_pg else ():   # a 0700 root folder is closed to the postgres user
        shutil.chown(path, "postgres")
    subprocess.run(as_pg + [str(bin_dir / "initdb"), "-D", str(data), "-U", "grpolab", "--auth=trust"], check=True,
                   capture_output=True)
    port = _start_on_a_free_port(as_pg, bin_dir, data, sock, log)

    def pg_ctl(*args):
        subprocess.run(as_pg + [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", *args], check=True,
                       capture_output=True)
    yield f"postgresql+psycopg2://grpolab@127.0.0.1:{port}/postgres", pg_ctl, port, sock
    subprocess.run(as_pg + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _signal_dispositions_restored(request):
    """Each test leaves SIGINT/SIGTERM as it found them (handler and mask). Subprocesses inherit
    an ignored or blocked signal, so one in-process test that leaves SIGINT ignored would make
    every later test's child ignore Ctrl-C (seen in a full-suite run: a `run` kept training
    through SIGINT). A change is restored and reported as a warning naming the test."""
    import signal
    watched = (signal.SIGINT, signal.SIGTERM)
    handlers = {s: signal.getsignal(s) for s in watched}
    yield
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if blocked & set(watched):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
        warnings.warn(f"{request.node.nodeid} left {sorted(blocked & set(watched))} blocked")
    for sig, handler in handlers.items():
        if signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
            warnings.warn(f"{request.node.nodeid} left the {sig.name} handler changed")
    ignored = (_ignored_at_c_level() - _IGNORED_AT_START) & set(watched)   # pytest started with SIGINT ignored: not the test's doing
    for sig in ignored:   # set by C code behind Python's back: signal.getsignal still shows the old handler
        signal.signal(sig, handlers[sig] if callable(handlers[sig]) else signal.SIG_DFL)
        warnings.warn(f"{request.node.nodeid} left {sig.name} ignored at the C level")


def _ignored_at_c_level() -> set:
    """Signals this process ignores per the kernel (/proc/self/status SigIgn), which children inherit."""
    import signal
    try:
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return set()
    mask = int(line.split()[1], 16)
    return {s for s in signal.Signals if s < 64 and mask >> (s - 1) & 1}


_IGNORED_AT_START = _ignored_at_c_level()   # the session's own SigIgn mask (nohup, a background job)


def trainable_report(model) -> tuple[int, int, list[str]]:
    """(trainable params, all params, names of trainable tensors)."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters()), names
