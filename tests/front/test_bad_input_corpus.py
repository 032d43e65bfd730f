"""Bad-input corpus: every command (run, study, table, dashboard, verdicts, bench, methods) given
files that are not what they claim, paths it cannot write to, override values that are not plain
YAML, requests its task cannot satisfy and studies whose settings cannot act.

Each case runs ``python -m grpolab.cli`` in its own folder (own cwd, own $HOME, own copy of a
state folder that already holds a recorded 2-row study) and must: exit 2; print exactly one
``error:`` line (``warning:`` lines aside) naming the key or path and what is valid; print no
traceback; create no MLflow run; write no file (state copy, cwd and $HOME byte-identical after,
so nothing recorded is lost either); and, where the answer needs no model, never import torch.
The cases are data, one a line (tests/data/bad_input_cases.yaml). They run concurrently once per
module; each test then reads its own outcome. A ``--storage`` whose server goes away between rows
is the corpus's store case, in test_bad_input_storage_gone.py (it needs a PostgreSQL server of its
own, stopped mid-study).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import REPO, built_once, run_study_data
from fault_helpers import BASE
from grpolab.tracking.recorder import relocate_artifacts, tracking_uri

AS_ROOT = os.geteuid() == 0   # chmod 000 does not stop root from reading: those cases are skipped there
# Run as ``python -m grpolab.cli`` does (runpy), then record whether torch was imported on the way out.
LAUNCH = ("import atexit, os, runpy, sys\n"
          "atexit.register(lambda: open(os.environ['CORPUS_MODULES'], 'w').write(str('torch' in sys.modules)))\n"
          "runpy.run_module('grpolab.cli', run_name='__main__')")


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple            # {name} placeholders: paths of the inputs (see make_inputs), {state}, {study}
    needles: tuple         # each must be in the error line (after the same formatting)
    unreadable: bool = False   # relies on chmod 000: skipped when the tests run as root


def _cases(path: Path = REPO / "tests" / "data" / "bad_input_cases.yaml") -> list[Case]:
    """The corpus, one case a line in its data file (args split as a shell would)."""
    cases = []
    for entry in yaml.safe_load(path.read_text()):
        extra = set(entry) - {"id", "args", "needles", "unreadable"}
        assert not extra, f"{path}: case {entry.get('id')}: unknown keys {sorted(extra)}"
        cases.append(Case(entry["id"], tuple(shlex.split(entry["args"])), tuple(entry["needles"]),
                          entry.get("unreadable", False)))
    return cases


CASES = _cases()


# -- inputs ------------------------------------------------------------------------------------------

def _experiment(model_dir: Path, **sections) -> dict:
    base = {**BASE, "model": {"path": str(model_dir)}, "train": {**BASE["train"], "steps": 1}}
    base.update(sections)
    return base


def _write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


def _gguf(tensor_elements: int, data: bytes) -> bytes:
    """A GGUF v3 file with no metadata and one f32 tensor of ``tensor_elements`` values, followed
    by ``data`` (short of the tensor's bytes: a truncated file)."""
    name = b"w"
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    head += struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, tensor_elements, 0, 0)
    return head + b"\0" * (-len(head) % 32) + data


def _model_copy(root: Path, name: str, model_dir: Path) -> Path:
    folder = root / name
    shutil.copytree(model_dir, folder)
    return folder


def _models(d: Path, model_dir: Path) -> dict:
    p = {}
    p["model_bad_config"] = _model_copy(d, "model_bad_config", model_dir)
    _write(p["model_bad_config"] / "config.json", "{\"model_type\": \"llama\", ")
    p["model_empty_config"] = _model_copy(d, "model_empty_config", model_dir)
    _write(p["model_empty_config"] / "config.json", "")
    p["model_no_type"] = _model_copy(d, "model_no_type", model_dir)
    _write(p["model_no_type"] / "config.json", "{}")
    p["model_no_weights"] = _model_copy(d, "model_no_weights", model_dir)
    (p["model_no_weights"] / "model.safetensors").unlink()
    p["model_cut"] = _model_copy(d, "model_cut", model_dir)
    weights = (model_dir / "model.safetensors").read_bytes()
    _write(p["model_cut"] / "model.safetensors", weights[: len(weights) * 2 // 3])
    p["model_empty_weights"] = _model_copy(d, "model_empty_weights", model_dir)
    _write(p["model_empty_weights"] / "model.safetensors", b"")
    p["model_junk_weights"] = _model_copy(d, "model_junk_weights", model_dir)
    _write(p["model_junk_weights"] / "model.safetensors", b"\xff" * 64)
    p["model_missing_shard"] = _model_copy(d, "model_missing_shard", model_dir)
    (p["model_missing_shard"] / "model.safetensors").rename(p["model_missing_shard"] / "model-00001-of-00002.safetensors")
    _write(p["model_missing_shard"] / "model.safetensors.index.json", json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    p.update(_bad_safetensors(d, model_dir))
    p["model_bin_junk"] = _model_copy(d, "model_bin_junk", model_dir)
    (p["model_bin_junk"] / "model.safetensors").rename(p["model_bin_junk"] / "pytorch_model.bin")
    p["model_cut_tokenizer"] = _model_copy(d, "model_cut_tokenizer", model_dir)
    _write(p["model_cut_tokenizer"] / "tokenizer.json", (model_dir / "tokenizer.json").read_text()[:40])
    p["model_junk_tokenizer_config"] = _model_copy(d, "model_junk_tokenizer_config", model_dir)
    _write(p["model_junk_tokenizer_config"] / "tokenizer_config.json", "garbage{")
    p["model_no_tokenizer"] = _model_copy(d, "model_no_tokenizer", model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (p["model_no_tokenizer"] / name).unlink()
    p["gguf_folder"] = d / "folder.gguf"
    p["gguf_folder"].mkdir()
    p["gguf_empty"] = _write(d / "empty.gguf", b"")
    p["gguf_junk"] = _write(d / "junk.gguf", b"PK\x03\x04" + b"\0" * 100)
    p["gguf_cut_header"] = _write(d / "cut_header.gguf", _gguf(1000, b"")[:20])
    p["gguf_cut_data"] = _write(d / "cut_data.gguf", _gguf(1000, b"\0" * 10))
    p["gguf_unreadable"] = _write(d / "unreadable.gguf", _gguf(1, b"\0" * 4))
    return p


def _bad_safetensors(d: Path, model_dir: Path) -> dict:
    """Copies whose safetensors header stays the file's exact length but holds one bad tensor
    entry: an unknown dtype, a shape its bytes cannot hold, data_offsets that are text."""
    raw = (model_dir / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    p = {}
    for key, field, value in (("model_bad_dtype", "dtype", "BOGUS"), ("model_bad_shape", "shape", [999999, 999]),
                              ("model_text_offsets", "data_offsets", "abc")):
        header = json.loads(raw[8:8 + n])
        header[next(k for k in header if k != "__metadata__")][field] = value
        text = json.dumps(header).encode()
        p[key] = _model_copy(d, key, model_dir)
        _write(p[key] / "model.safetensors", struct.pack("<Q", len(text)) + text + raw[8 + n:])
    return p


def _datasets(d: Path) -> dict:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(40)]
    lines = [json.dumps(r) for r in rows]
    p = {"jsonl_good": _write(d / "sums.jsonl", "\n".join(lines) + "\n")}
    p["jsonl_empty"] = _write(d / "empty.jsonl", "")
    p["jsonl_cut"] = _write(d / "cut.jsonl", "\n".join(lines[:5]) + "\n" + lines[5][:12])
    p["jsonl_columns"] = _write(d / "columns.jsonl", "\n".join(json.dumps({"question": r["prompt"], "solution": r["answer"]})
                                                               for r in rows))
    p["jsonl_three"] = _write(d / "three.jsonl", "\n".join(lines[:3]))
    p["jsonl_unreadable"] = _write(d / "unreadable.jsonl", "\n".join(lines))
    p["csv_empty"] = _write(d / "empty.csv", "")
    p["csv_columns"] = _write(d / "columns.csv", "q,a\n" + "".join(f"{i}+{i}=,{2 * i}\n" for i in range(40)))
    pq.write_table(pa.Table.from_pylist(rows), d / "good.parquet")
    whole = (d / "good.parquet").read_bytes()
    p["parquet_cut"] = _write(d / "cut.parquet", whole[: len(whole) // 2])
    p["parquet_junk"] = _write(d / "junk.parquet", b"not parquet at all\n" * 20)
    p["empty_folder"] = d / "empty_folder"
    p["empty_folder"].mkdir()
    p["dataset_cut"] = d / "dataset_cut"
    datasets.Dataset.from_list(rows).save_to_disk(str(p["dataset_cut"]))
    for arrow in p["dataset_cut"].glob("*.arrow"):
        arrow.write_bytes(arrow.read_bytes()[:200])
    p["data_txt"] = _write(d / "sums.txt", "\n".join(lines))
    return p


def _studies(d: Path, model_dir: Path, recorded: Path) -> dict:
    exp = _experiment(model_dir)
    ladder = {"kind": "ladder", "base": exp, "seeds": [0], "rungs": [{"name": "base"}]}
    search = {"kind": "search", "base": exp, "seeds": [0], "n_trials": 2}
    p = {"study_base_missing": _write(d / "base_missing.yaml", {**ladder, "base": "nowhere.yaml"})}
    p["search_unknown_key"] = _write(d / "search_key.yaml", {**search, "space": {
        "train.learning_rat": {"type": "float", "low": 1e-4, "high": 1e-3}}})
    p["search_bad_choice"] = _write(d / "search_choice.yaml", {**search, "space": {
        "method.surrogate": {"type": "categorical", "choices": ["clip", "nope"]}}})
    p["search_bad_range"] = _write(d / "search_range.yaml", {**search, "space": {
        "train.group_size": {"type": "int", "low": 1, "high": 8}}})
    p["search_float_over_int"] = _write(d / "search_float_int.yaml", {**search, "space": {
        "train.group_size": {"type": "float", "low": 2, "high": 8}}})
    p["search_one_choice"] = _write(d / "search_one.yaml", {**search, "space": {
        "method.eps_high": {"type": "categorical", "choices": [0.28]}}})
    p["search_repeated_choice"] = _write(d / "search_repeated.yaml", {**search, "space": {
        "train.learning_rate": {"type": "categorical", "choices": [2e-4, 2e-4]}}})
    p["ladder_first_no_op"] = _write(d / "first_no_op.yaml", {**ladder, "rungs": [   # the base already trains 1 step
        {"name": "base", "changes": {"train.steps": 1}}, {"name": "clip", "changes": {"method.eps_high": 0.28}}]})
    p["ladder_no_op"] = _write(d / "no_op.yaml", {**ladder, "rungs": [
        {"name": "base"}, {"name": "same lr", "changes": {"train.learning_rate": 2e-4}}]})
    p["ladder_default"] = _write(d / "default.yaml", {**ladder, "rungs": [   # grpo's own eps_high is 0.2
        {"name": "base"}, {"name": "eps 0.2", "changes": {"method.eps_high": 0.2}}]})
    p["ladder_identical"] = _write(d / "identical.yaml", {**ladder, "rungs": [
        {"name": "base"}, {"name": "eps 0.28", "changes": {"method.eps_high": 0.28}},
        {"name": "back to 0.2", "changes": {"method.eps_high": 0.2}}]})
    p["ladder_unknown_key"] = _write(d / "unknown_key.yaml", {**ladder, "rungs": [
        {"name": "base"}, {"name": "typo", "changes": {"method.eps_hihg": 0.28}}]})
    claim = {"source": "corpus", "statement": "clip higher changes nothing here", "study": recorded.name,
             "treatment": {"rung": "+ clip higher"}, "control": {"rung": "base"}, "metric": "final:eval/pass_at_1",
             "direction": "increase", "smallest_effect": 0.1}
    claims = d / "claims"
    p["claim_good"] = _write(claims / "good.yaml", claim)
    p["claim_empty"] = _write(claims / "empty.yaml", "")
    p["claim_cut"] = _write(claims / "cut.yaml", yaml.safe_dump(claim)[:60] + "{unclosed: [")
    p["claim_no_study"] = _write(claims / "no_study.yaml", {**claim, "study": "nowhere.yaml"})
    p["claim_no_rung"] = _write(claims / "no_rung.yaml", {**claim, "treatment": {"rung": "+ nothing"}})
    p["claim_bad_metric"] = _write(claims / "bad_metric.yaml", {**claim, "metric": "final:eval/nope"})
    p["layout_bad_key"] = _write(d / "layout_key.yaml", {"title": "x", "colour": "red"})
    p["layout_bad_x"] = _write(d / "layout_x.yaml", {"x": "minutes"})
    p["layout_panels_scalar"] = _write(d / "layout_panels.yaml", {"panels": 3})
    p["layout_ablation_text"] = _write(d / "layout_ablation.yaml", {"ablation": "maybe"})
    return p


def make_inputs(d: Path, model_dir: Path, recorded: Path) -> dict:
    p = {"d": d, "study": recorded}
    p["exp"] = _write(d / "exp.yaml", _experiment(model_dir))
    p["empty"] = _write(d / "empty.yaml", "")
    p["comments"] = _write(d / "comments.yaml", "# nothing yet\n")
    p["unreadable_yaml"] = _write(d / "unreadable.yaml", yaml.safe_dump(_experiment(model_dir)))
    p["truncated_yaml"] = _write(d / "truncated.yaml", yaml.safe_dump(_experiment(model_dir), default_flow_style=True)[:90])
    p["binary"] = _write(d / "binary.yaml", bytes(range(256)) * 4)
    p["list_yaml"] = _write(d / "list.yaml", "- method: grpo\n- task: addition\n")
    p["tagged_yaml"] = _write(d / "tagged.yaml", "method: !!python/object/apply:os.system ['touch pwned']\n")
    p["dup_key"] = _write(d / "dup.yaml", "seed: 1\nmethod: grpo\nseed: 2\n")
    p["file_state"] = _write(d / "state_file", "not a folder\n")
    p["resume_exp"] = _write(d / "resume_exp.yaml", _experiment(model_dir, name=INTERRUPTED,
                                                                train={**BASE["train"], "steps": 4, "save_every": 2}))
    p["readonly_folder"] = d / "readonly"
    p["readonly_folder"].mkdir()
    p.update(_models(d, model_dir))
    p.update(_datasets(d))
    p["data_exp"] = _write(d / "data_exp.yaml", _experiment(model_dir, task={
        "name": "local_dataset", "path": str(p["jsonl_good"]), "extract": "last_number", "grade": "numeric"},
        eval={"prompts": 4, "k": 2, "every": 0}, train={**BASE["train"], "steps": 1, "n_train_prompts": 32}))
    assert "digits" not in yaml.safe_load(p["data_exp"].read_text())["task"]
    p.update(_studies(d, model_dir, recorded))
    for key in ("unreadable_yaml", "gguf_unreadable", "jsonl_unreadable"):
        p[key].chmod(0)
    p["readonly_folder"].chmod(0o555)
    return p


INTERRUPTED = "interrupted"   # the experiment name of the run whose checkpoints are all cut


def interrupted_run(state: Path) -> None:
    """An interrupted (KILLED) run of ``resume_exp`` whose two checkpoint folders cannot be resumed
    from: checkpoint-2's completion marker was cut mid-write, checkpoint-4's weights were cut
    after it was saved."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri(state))
    run = client.create_run(client.get_experiment_by_name(BASE["tracking"]["experiment"]).experiment_id,
                            run_name=f"{INTERRUPTED}-s0")
    client.set_terminated(run.info.run_id, "KILLED")
    folder = state / "runs" / run.info.run_id
    _write(folder / "config.json", "{}")
    _write(folder / "checkpoint-2" / "grpolab_complete.json", '{"step": 2, "fil')
    _write(folder / "checkpoint-4" / "model.safetensors", b"\0" * 10)
    _write(folder / "checkpoint-4" / "grpolab_complete.json", json.dumps({"step": 4, "files": {"model.safetensors": 20}}))


# -- running and snapshots -----------------------------------------------------------------------------

def snapshot(*roots: Path) -> dict:
    """{path: sha1 of its bytes, or 'dir'} for everything under the roots (read as this user can)."""
    out = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")]) if root.exists() else []:
            if path.is_dir():
                out[str(path)] = "dir"
            else:
                try:
                    out[str(path)] = hashlib.sha1(path.read_bytes()).hexdigest()
                except PermissionError:
                    out[str(path)] = f"unreadable {path.stat().st_size}"
    return out


def mlflow_runs(state: Path) -> list:
    db = state / "mlflow.db"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return sorted(conn.execute("select run_uuid, status from runs").fetchall())


@dataclass
class Outcome:
    code: int
    stderr: str
    stdout: str
    torch: bool | None
    before: dict
    after: dict
    runs_before: list
    runs_after: list
    seconds: float


def run_case(case: Case, inputs: dict, recorded_state: Path, root: Path) -> Outcome:
    folder = root / case.id
    state, cwd, home = folder / "state", folder / "cwd", folder / "home"
    shutil.copytree(recorded_state, state)
    relocate_artifacts(tracking_uri(state), state)   # a moved state folder is re-pointed once, by design: done here
    cwd.mkdir()
    home.mkdir()
    args = [a.format(**inputs, state=state) for a in case.args]
    if not any(a == "--state" for a in args):
        args = ["--state", str(state), *args]
    marker = folder / "modules"
    before, runs_before = snapshot(state, cwd, home), mlflow_runs(state)
    env = {**os.environ, "HOME": str(home), "CORPUS_MODULES": str(marker)}
    env.pop("GRPOLAB_STATE", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", LAUNCH, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    seconds = time.perf_counter() - started
    torch = marker.read_text() == "True" if marker.exists() else None
    return Outcome(proc.returncode, proc.stderr, proc.stdout, torch, before, snapshot(state, cwd, home), runs_before,
                   mlflow_runs(state), seconds)


def build_corpus(root: Path, tiny_model_dir: Path) -> dict:
    """Every runnable case's outcome, run 3 at a time, plus the inputs and what they held before."""
    recorded_state = root / "recorded-state"
    (root / "inputs").mkdir()
    run_study_data(root / "inputs", {
        "kind": "ladder", "name": "corpus_recorded", "base": _experiment(tiny_model_dir), "seeds": [0],
        "rungs": [{"name": "base"}, {"name": "+ clip higher", "changes": {"method.eps_high": 0.28}}]},
        recorded_state, "recorded.yaml")
    assert len(mlflow_runs(recorded_state)) == 3   # the study's parent run and its two rows
    interrupted_run(recorded_state)
    inputs = make_inputs(root / "inputs", tiny_model_dir, root / "inputs" / "recorded.yaml")
    inputs_before = snapshot(root / "inputs")
    runnable = [c for c in CASES if not (c.unreadable and AS_ROOT)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = dict(zip([c.id for c in runnable],
                            pool.map(lambda c: run_case(c, inputs, recorded_state, root / "cases"), runnable)))
    wall = time.perf_counter() - started
    slow = sorted(outcomes.items(), key=lambda kv: -kv[1].seconds)[:8]
    print("\nCORPUS slowest: " + ", ".join(f"{k} {o.seconds:.1f}s torch={o.torch}" for k, o in slow))
    print(f"CORPUS cases={len(runnable)} (skipped as root: {len(CASES) - len(runnable)}) wall_seconds={wall:.1f} "
          f"slowest={max(o.seconds for o in outcomes.values()):.1f}s")
    if os.environ.get("CORPUS_ANSWERS"):   # a table of every case's command and answer, for notes
        with open(os.environ["CORPUS_ANSWERS"], "w") as out:
            for case in runnable:
                args = " ".join(shlex.quote(a.format(**inputs, state="STATE")) for a in case.args).replace(str(root), "…")
                answer = [l for l in outcomes[case.id].stderr.splitlines() if l.startswith("error:")]
                out.write(f"{case.id}\t`grpolab {args}`\t{(answer or ['?'])[0].replace(str(root), '…')}\n")
    return {"inputs": {k: str(v) for k, v in inputs.items()},
            "outcomes": {k: dataclasses.asdict(o) for k, o in outcomes.items()},
            "inputs_before": inputs_before, "recorded_runs": mlflow_runs(recorded_state)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_model_dir):
    """The corpus, run once per test session: every xdist worker that runs some of its cases reads the
    outcomes the first one recorded (``built_once``), so the ~70 commands never run twice. The
    chmod-000 inputs keep their modes to the session's end (pytest's own clean-up removes them)."""
    root, built = built_once(tmp_path_factory, "corpus", lambda root: build_corpus(root, tiny_model_dir))
    yield {"inputs": {k: Path(v) for k, v in built["inputs"].items()},
           "outcomes": {k: Outcome(**o) for k, o in built["outcomes"].items()}, "root": root,
           "inputs_before": built["inputs_before"], "recorded_state": root / "recorded-state",
           "recorded_runs": [tuple(r) for r in built["recorded_runs"]]}


def test_the_corpus_covers_every_command_and_class():
    commands = {next(a for a in c.args if not a.startswith(("-", "{"))) for c in CASES}
    assert {"run", "study", "table", "dashboard", "verdicts", "bench", "methods"} <= commands
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(case, corpus):
    if case.unreadable and AS_ROOT:
        pytest.skip("runs as root: chmod 000 does not stop root from reading, so this input is readable here")
    out = corpus["outcomes"][case.id]
    assert out.code == 2, (out.code, out.stderr[-3000:])
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for needle in case.needles:
        needle = needle.format(**corpus["inputs"])
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert out.stdout == ""
    assert out.runs_after == out.runs_before          # no MLflow run created, none changed
    assert out.after == out.before                    # nothing written in the state copy, cwd or $HOME; nothing lost
    assert out.torch is False, "torch was imported before the answer"


def test_the_corpus_left_its_inputs_and_the_recorded_state_intact(corpus):
    assert snapshot(corpus["root"] / "inputs") == corpus["inputs_before"]   # e.g. no 'pwned' from a python tag
    assert not list(corpus["root"].rglob("pwned"))
    assert mlflow_runs(corpus["recorded_state"]) == corpus["recorded_runs"]


# -- inputs a command recovers from: it says what it did, and nothing recorded is lost ---------------

def test_a_journal_cut_mid_record_is_repaired_and_the_study_goes_on(tmp_path, tiny_model_dir):
    """A study's Optuna journal whose last record was cut mid-write (its writer killed mid-append):
    the next command cuts the partial record off under the journal's lock (Optuna would append
    after it and merge both into one unreadable line), keeps the cut bytes beside the journal,
    says so in one warning line, and every complete record stays: the rows stay COMPLETE, and the
    commands after it (which append to the journal) read it back whole."""
    state = tmp_path / "state"
    data = {"kind": "ladder", "name": "journal_cut", "base": _experiment(tiny_model_dir), "seeds": [0],
            "rungs": [{"name": "base"}]}
    run_study_data(tmp_path, data, state, "journal_cut.yaml")
    journal = state / "optuna.journal"
    records = journal.read_bytes()
    last = records[:-1].rsplit(b"\n", 1)[-1]
    journal.write_bytes(records + last[: len(last) // 2])           # a record cut at half its bytes
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "grpolab.cli", "--state", str(state)]
    again = subprocess.run([*cmd, "study", str(tmp_path / "journal_cut.yaml")], env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    warned = [line for line in again.stderr.splitlines() if "last record was cut short" in line]
    assert len(warned) == 1 and str(journal) in warned[0] and f"cut its {len(last) // 2} bytes off" in warned[0]
    assert (state / f"optuna.journal.partial-{len(records)}").read_bytes() == last[: len(last) // 2]
    assert journal.read_bytes().startswith(records)                 # every complete record, as it was
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())   # and each later one whole
    table = subprocess.run([*cmd, "table", str(tmp_path / "journal_cut.yaml")], env=env, capture_output=True,
                           text=True, timeout=300)
    assert table.returncode == 0 and "Traceback" not in table.stderr and "base" in table.stdout, table.stderr[-3000:]
