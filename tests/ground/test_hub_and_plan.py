"""Hub ids through the Hugging Face cache (grpolab.hub) and study plans (grpolab study --plan).

A hub cache is written offline as the hub client lays it out (tests/hub_cache.py): a tiny model
built by the toy world and small datasets. HF_HUB_OFFLINE=1 throughout: nothing downloads."""

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hub_cache import folder_files, go_offline, parquet_bytes, put_repo

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "mlflow", "peft", "optuna", "trl", "accelerate")
CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
- config_name: aime
  data_files: aime/*.jsonl
---
# a card
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tiny_model_dir):
    """A hub cache holding tester/tiny-char (the tiny preset), tester/sums (train and test
    parquet shards named as the hub names them) and tester/cards (configs in its dataset card,
    chat-message prompts, nested answers, every row twice)."""
    cache = tmp_path_factory.mktemp("hf-hub")
    put_repo(cache, "tester/tiny-char", folder_files(tiny_model_dir))
    train = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(40)]
    test = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(50, 58)]
    put_repo(cache, "tester/sums", {"data/train-00000-of-00001.parquet": parquet_bytes(train),
                                    "data/test-00000-of-00001.parquet": parquet_bytes(test)}, "dataset")
    chats = [{"prompt": [{"role": "user", "content": f"Q{i}"}], "reward_model": {"ground_truth": str(i)}}
             for i in range(12)] * 2
    aime = "\n".join(json.dumps({"prompt": [{"role": "user", "content": f"A{i}"}],
                                 "reward_model": {"ground_truth": str(i)}}) for i in range(3)).encode()
    put_repo(cache, "tester/cards", {"README.md": CARD.encode(), "data/train-00000-of-00001.parquet": parquet_bytes(chats),
                                     "aime/aime.jsonl": aime}, "dataset")
    put_repo(cache, "tester/cards", {"README.md": CARD.encode(), "data/train-00000-of-00001.parquet":
                                     parquet_bytes(chats[:6])}, "dataset", revision="v0")
    return cache


@pytest.fixture
def offline(hub, monkeypatch):
    return go_offline(monkeypatch, hub)


def _env(cache) -> dict:
    return {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}   # PYTHONPATH: conftest's,
    # this checkout first, then the caller's (a GPU machine's packages may live there)


def _cli(args: list[str], env: dict) -> tuple[int, str, str, list[str], float]:
    """grpolab in a fresh process: (exit code, stdout, stderr, heavy modules it imported, CPU seconds
    of the process: wall time on a shared 2-core machine measures the neighbours too)."""
    probe = (f"import sys\nfrom grpolab.cli import main\ncode = main({args!r})\n"
             f"print('HEAVY', ','.join(m for m in {HEAVY!r} if m in sys.modules))\nsys.exit(code)")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    body, _, heavy = out.stdout.rpartition("HEAVY ")
    return out.returncode, body, out.stderr, [m for m in heavy.strip().split(",") if m], cpu


def test_hub_datasets_resolve_configs_splits_revisions_nested_fields_and_chat_prompts(offline, tmp_path):
    from grpolab.errors import ConfigError
    from grpolab.tasks import hub_sources, make_task
    task = make_task("local_dataset", path="tester/cards", answer_field="reward_model.ground_truth",
                     held_out={"config": "aime"}, extract="last_number", grade="numeric", max_completion_length=8)
    assert [e.prompt for e in task.source.examples][:3] == ["Q0", "Q1", "Q2"]   # the user message of each chat
    assert len(task.source.examples) == 12                                      # rows repeated twice count once
    train, held = task.splits(0, 100, 10)
    assert sorted(e.prompt for e in held) == ["A0", "A1", "A2"] and len(train) == 12
    assert hub_sources(task)["dataset"].startswith("tester/cards@") and len(hub_sources(task)["held_out"]) > 20
    old = make_task("local_dataset", path="tester/cards", answer_field="reward_model.ground_truth", revision="v0",
                    extract="last_number", grade="numeric", max_completion_length=8)
    assert len(old.source.examples) == 6
    for params, needle in [({"split": "validation"}, "task.split: 'validation' is not a split of 'tester/cards' (config default); splits: train"),
                           ({"config": "nope"}, "task.config: 'tester/cards' has the configs default, aime; 'nope' is not one"),
                           ({"held_out": {"split": "train"}}, "task.held_out: names the training rows themselves"),
                           ({"answer_field": "reward_model.answer"}, "task.answer_field: column 'reward_model.answer' is not in"),
                           ({"revision": "v9"}, "and HF_HUB_OFFLINE is set")]:
        with pytest.raises(ConfigError, match=None) as err:
            make_task("local_dataset", **{"path": "tester/cards", "answer_field": "reward_model.ground_truth",
                                          "max_completion_length": 8, **params})
        assert needle in str(err.value), str(err.value)
    by_name = make_task("local_dataset", path="tester/sums", held_out={"split": "test"}, max_completion_length=4)
    assert len(by_name.source.examples) == 40 and len(by_name.splits(0, 100, 100)[1]) == 8
    local = tmp_path / "rows.jsonl"
    local.write_text("\n".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(8)))
    with pytest.raises(ConfigError, match="task.config: only for a hub dataset"):
        make_task("local_dataset", path=str(local), config="main")
    from grpolab.experiment.config import build_config
    with pytest.raises(ConfigError, match="model.revision: only for a hub id"):
        build_config({"model": {"path": str(next((offline / "models--tester--tiny-char" / "snapshots").iterdir())),
                                "revision": "main"}})


HUB_RUN = {"name": "hub_run", "method": "grpo", "model": {"path": "tester/tiny-char", "revision": "main"},
           "task": {"name": "local_dataset", "path": "tester/sums", "held_out": {"split": "test"},
                    "extract": "last_number", "grade": "numeric", "max_completion_length": 4},
           "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 2}, "eval": {"every": 0, "prompts": 4, "k": 2}}


def test_a_cached_hub_model_and_dataset_train_a_two_step_run(offline, shared_state, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from grpolab.cli import main
    from grpolab.tracking.recorder import tracking_uri
    exp = HUB_RUN
    path = tmp_path / "hub_run.yaml"
    path.write_text(yaml.safe_dump(exp))
    assert main(["--state", str(shared_state), "run", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "FINISHED" and summary["steps"] == 2
    run = MlflowClient(tracking_uri(shared_state)).get_run(summary["run_id"])
    model_commit = next((offline / "models--tester--tiny-char" / "snapshots").iterdir()).name
    assert run.data.tags["grpolab.hub.model"] == f"tester/tiny-char@{model_commit}"
    assert run.data.tags["grpolab.hub.dataset"].startswith("tester/sums@")
    assert run.data.params["model.path"] == "tester/tiny-char" and run.data.params["model.revision"] == "main"


def test_bench_throughput_measures_a_study_row_for_the_plan(offline, shared_state, tmp_path, capsys):
    from grpolab.cli import main
    study = {"kind": "ladder", "name": "hub_bench", "base": HUB_RUN, "seeds": [3], "rungs": [{"name": "only"}]}
    path = tmp_path / "hub_bench.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["--state", str(shared_state), "bench", "--what", "throughput", str(path), "--rollouts", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 1 and 0 < out["generated_tokens"] <= 2 * 4 * 4 and out["tokens_per_second"] > 0
    assert out["plan"] == f"grpolab study {path} --plan --tokens-per-second {out['tokens_per_second']}"


def test_a_hub_id_missing_offline_exits_2_naming_it_and_the_cache_before_anything_is_written(offline, tmp_path, capsys):
    from grpolab.cli import main
    exp = {"name": "absent", "method": "grpo", "model": {"path": "tester/absent-model"},
           "task": {"name": "addition"}, "train": {"steps": 2}}
    study = {"kind": "ladder", "name": "absent_study", "base": exp, "seeds": [0], "rungs": [{"name": "only"}]}
    (tmp_path / "absent.yaml").write_text(yaml.safe_dump(exp))
    (tmp_path / "absent_study.yaml").write_text(yaml.safe_dump(study))
    state = tmp_path / "state"
    for argv in (["run", str(tmp_path / "absent.yaml")], ["study", str(tmp_path / "absent_study.yaml")]):
        assert main(["--state", str(state), *argv]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, errors
        assert "'tester/absent-model'" in errors[0] and str(offline) in errors[0] and "HF_HUB_OFFLINE" in errors[0]
        assert not state.exists()                                   # no MLflow run, no state files
    assert not (offline / "models--tester--absent-model").exists()  # nor anything in the hub cache
    assert main(["--state", str(state), "study", str(tmp_path / "absent_study.yaml"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert f"model.path: model 'tester/absent-model' (revision main) is not in the local Hugging Face cache ({offline}): " \
           "will be downloaded" in out
    assert not state.exists()


SMALL = {"kind": "ladder", "name": "plan_small", "seeds": [0, 1, 2],
         "base": {"method": "grpo", "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                  "train": {"steps": 10, "group_size": 4, "prompts_per_rollout": 8, "minibatches": 2,
                            "max_completion_length": 16},
                  "eval": {"every": 4, "prompts": 10, "k": 3}},
         "plan": {"expected_completion_tokens": 10, "devices_per_row": 2},
         "rungs": [{"name": "static"}, {"name": "dynamic", "changes": {"method.sampling": "dynamic"}}]}


def test_plan_of_a_small_study_is_computed_by_hand_without_torch(tmp_path):
    path = tmp_path / "plan_small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    code, out, err, heavy, _ = _cli(["--state", str(tmp_path / "state"), "study", str(path), "--plan",
                                     "--tokens-per-second", "2"], _env(tmp_path / "hf"))
    assert code == 0, err
    assert heavy == []
    # per row: rollouts = ceil(10 / 2) = 5; train = 5 x 8 x 4 x 10 = 1,600; evals = 2 + (10 - 1) // 4 = 4;
    # eval = 4 x 10 x (3 + 1) x 10 = 1,600; GPU-h = 2 devices x 3,200 / 2 / 3600 = 0.89
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("r")}
    assert rows["r0"][1:] == ["static", "3", "5", "8", "x", "4", "10", "1,600", "4", "1,600", "2", "0.89"]
    assert rows["r1"][1:] == ["dynamic", "3", "5", "8", "x", "4", "10", "1,600", "(up", "to", "x4)", "4", "1,600", "2", "0.89"]
    assert "2 rungs x 3 seeds = 6 rows" in out and "devices per row: 2 (plan.devices_per_row)" in out
    # dynamic sampling: up to 3 more rounds of the train tokens on its 3 rows: 3 x 2 x 1,600 x 3 / 2 / 3600 = 4.00
    assert "total: 6 rows, 19,200 generated tokens, 5.33 GPU-hours (dynamic sampling may add up to 4.00 more)" in out
    assert not (tmp_path / "state").exists()
    code, out, err, _, _ = _cli(["study", str(path), "--plan"], _env(tmp_path / "hf"))
    assert code == 0 and "grpolab bench --what throughput" in out and "GPU-hours:" in out


def test_plan_counts_the_final_benchmark_and_the_seeds_on_demand_by_hand(tmp_path):
    study = {**SMALL, "seeds": {"first": 3, "batch": 3, "cap": 9, "max_rows": 14}, "smallest_effect": 0.02,
             "base": {**SMALL["base"], "eval": {**SMALL["base"]["eval"], "final_prompts": 20, "final_k": 5}}}
    path = tmp_path / "plan_final.yaml"
    path.write_text(yaml.safe_dump(study))
    code, out, err, _, _ = _cli(["study", str(path), "--plan", "--tokens-per-second", "2"], _env(tmp_path / "hf"))
    assert code == 0, err
    # eval = (3 evals x 10 x (3 + 1) + the final 20 x (5 + 1)) x 10 = 2,400; GPU-h = 2 x 4,000 / 2 / 3600 = 1.11
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("r")}
    assert rows["r0"][-4:] == ["4", "2,400", "2", "1.11"]
    assert ("seeds on demand: first batch 3 seeds = 6 rows, 24,000 tokens, 6.67 GPU-hours; then 3 more per look "
            "until every rung is decided, at most 9 seeds = 18 rows, 72,000 tokens, 20.00 GPU-hours; no look past 14 rows "
            "(7 seeds of every rung)") in out


@pytest.mark.parametrize("study", ["dapo_table1_qwen", "dr_grpo_length_qwen"])
def test_shipped_real_scale_studies_plan_offline_without_weights_or_torch(study, tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty-hf-cache"
    start = time.perf_counter()
    code, out, err, heavy, cpu = _cli(["--state", str(tmp_path / "state"), "study", f"studies/{study}.yaml",
                                       "--plan", "--tokens-per-second", "5000"], _env(empty))
    print(out)
    print(f"plan of {study}: {cpu:.2f} CPU-s, {time.perf_counter() - start:.2f} s wall")
    assert code == 0, err
    assert heavy == []   # the time is reported (printed above, and by the closing note), never enforced
    # the model, the train and held-out datasets, and dr_grpo's named benchmark AIME 2024
    assert out.count("not in the local Hugging Face cache") == (4 if study == "dr_grpo_length_qwen" else 3)
    assert "will be downloaded" in out
    assert "Qwen/Qwen2.5-Math-1.5B" in out and "GPU-hours" in out
    if study == "dapo_table1_qwen":   # AIME 2024 avg@32 at the end, seeds on demand with the cap's GPU-hours
        assert "first batch 5 seeds = 30 rows" in out and "at most 15 seeds = 90 rows" in out
    from grpolab.cli import main  # without --plan the same file is refused offline, before anything is written
    monkeypatch.setenv("HF_HUB_CACHE", str(empty))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["--state", str(tmp_path / "state"), "study", f"studies/{study}.yaml"]) == 2
    err = capsys.readouterr().err
    assert "HF_HUB_OFFLINE is set" in err and str(empty) in err and not (tmp_path / "state").exists()


def test_qwen_ladder_soft_punishment_weighs_against_the_reward_range_as_dapos_does():
    """DAPO's soft overlong penalty reaches -1 against rewards of +-1 (a range of 2); grpolab's
    correctness is 1 / 0 (a range of 1), so the same weight is a penalty of 0.5."""
    study = yaml.safe_load((REPO / "studies" / "dapo_table1_qwen.yaml").read_text())   # bf16: not loadable on a CPU
    soft = next(r for r in study["rungs"] if r["name"] == "+ Soft Overlong Punishment")
    assert soft["changes"]["method.overlong_penalty"] / (1 - 0) == pytest.approx(1.0 / (1 - (-1)))
    assert any("overlong_penalty 1.0 -> 0.5" in d["change"] for d in study["deviations"])
