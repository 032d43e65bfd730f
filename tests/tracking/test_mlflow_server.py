"""A real `mlflow server` on loopback (SQLite backend, proxied artifacts under tmp): one run and a
2-row study are recorded through its REST API and read back through it: params, metrics, tags,
the samples table and the artifacts of the runs and of the study's parent run."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import mlflow
import pytest
import yaml
from mlflow.tracking import MlflowClient

from grpolab.experiment.config import build_config
from grpolab.experiment.runner import run_experiment
from grpolab.report.publish import record_study_tables
from grpolab.studies.coordinator import run_study
from grpolab.studies.study_run import StudyRun

BASE = {"task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
        "train": {"group_size": 4, "prompts_per_rollout": 4, "minibatches": 2, "learning_rate": 0.002},
        "eval": {"prompts": 4, "k": 2}, "tracking": {"experiment": "server-test", "flush_every": 1, "samples": 3}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}", "--artifacts-destination", str(tmp / "artifacts")]
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
                                 # MLflow's job runner (huey consumers, for its GenAI jobs) is not used by grpolab:
                                 # left on, it starts 7 processes that cost ~15 CPU-s of the suite
                                 "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"mlflow server did not come up: {(tmp / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield url, tmp
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.fixture
def on_server(server, monkeypatch):
    url, _ = server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    mlflow.set_tracking_uri(url)
    yield MlflowClient(url)
    mlflow.set_tracking_uri(None)


def test_run_through_the_rest_api(on_server, server, shared_state, tmp_path):
    cfg = build_config({**BASE, "name": "server_run", "seed": 3, "method": {"base": "dapo", "sampling": "static"},
                        "train": {**BASE["train"], "steps": 2}, "eval": {**BASE["eval"], "every": 1}})
    result = run_experiment(cfg, shared_state)
    client = on_server
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "server_run-s3"
    tags = run.data.tags
    assert tags["grpolab.seed"] == "3" and tags["grpolab.method"] == "dapo + sampling=static"
    assert tags["grpolab.method_base"] == "dapo" and len(tags["mlflow.source.git.commit"]) == 40
    params = run.data.params
    assert params["method.eps_high"] == "0.28" and params["train.steps"] == "2" and params["seed"] == "3"
    assert "method.dpo_beta" not in params and not any(k.startswith("tracking.") for k in params)
    assert "train_runtime" not in run.data.metrics and "total_flos" not in run.data.metrics
    history = client.get_metric_history(result.run_id, "eval/pass_at_1")
    assert [m.step for m in history] == [0, 1, 2]
    assert history[-1].value == pytest.approx(result.final_eval["eval/pass_at_1"])
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")     # the server's proxied store
    samples = client.load_table(run.info.experiment_id, "samples.json", run_ids=[result.run_id])
    assert len(samples) == 3 and set(samples.step) == {2}      # 3 kept rows per logged rollout (2 steps each)
    config = json.loads(open(client.download_artifacts(result.run_id, "config.json", str(tmp_path))).read())
    assert config["seed"] == 3 and config["method"]["eps_high"] == 0.28


def test_two_row_study_through_the_rest_api(on_server, shared_state, tmp_path):
    study = {"kind": "ladder", "name": "server_ladder", "seeds": [0], "metric": "final:eval/pass_at_1",
             "base": {**BASE, "method": {"base": "grpo"}}, "budget": {"train.steps": 2, "eval.every": 1},
             "rungs": [{"name": "GRPO", "published": 30},
                       {"name": "+ Clip_Higher 28%", "changes": {"method.eps_high": 0.28}, "published": 38}]}
    path = tmp_path / "server_ladder.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    assert run_study(StudyRun.of(str(path), shared_state,
                                 workers=1, echo=lambda s: None, publish=record_study_tables)) == 0
    client = on_server
    exp = client.get_experiment_by_name("server-test")
    parent = client.search_runs([exp.experiment_id], "attributes.run_name = 'server_ladder'")[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["grpolab.rows_done"] == "2/2"
    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
                                  order_by=["attributes.run_name ASC"])
    assert [c.info.run_name for c in children] == ["r0 GRPO · seed 0", "r1 + Clip_Higher 28% · seed 0"]
    assert [c.data.tags["grpolab.method"] for c in children] == ["grpo", "grpo + eps_high=0.28"]
    assert [c.data.params["method.eps_high"] for c in children] == ["0.2", "0.28"]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"study.yaml", "table.md", "table.csv", "dashboard.html"} <= artifacts   # a finished study: its page too
    csv = open(client.download_artifacts(parent.info.run_id, "table.csv", str(tmp_path))).read().splitlines()
    assert csv[0].startswith("deviations,rung,n,censored,mean,ci95") and csv[2].startswith("none,+ Clip_Higher 28%,1,0,")
    # `grpolab study --dashboard` puts the page on the parent run too (plotly.js shared: a small page).
    from grpolab.report.dashboard import build_dashboard
    from grpolab.report.publish import attach_dashboard
    page = build_dashboard(shared_state, tmp_path / "dash" / "server_ladder.html", str(path), plotlyjs="shared")
    attach_dashboard(shared_state, parent.info.run_id, page)
    stored = client.download_artifacts(parent.info.run_id, "dashboard.html", str(tmp_path / "back"))
    assert open(stored).read() == page.read_text()
    assert any(a.path.startswith("plotly-") for a in client.list_artifacts(parent.info.run_id))
    # Running the finished study again changes nothing, not even the parent's end time.
    end_time = parent.info.end_time
    assert run_study(StudyRun.of(str(path), shared_state,
                                 workers=1, echo=lambda s: None, publish=record_study_tables)) == 0
    assert client.get_run(parent.info.run_id).info.end_time == end_time


def test_log_model_puts_the_final_model_into_the_servers_artifacts(on_server, shared_state):
    cfg = build_config({**BASE, "name": "server_model", "train": {**BASE["train"], "steps": 2},
                        "eval": {**BASE["eval"], "every": 0}, "tracking": {**BASE["tracking"], "log_model": True}})
    result = run_experiment(cfg, shared_state)
    listed = {a.path: a.file_size for a in on_server.list_artifacts(result.run_id, "model")}
    assert {"model/config.json", "model/model.safetensors", "model/tokenizer_config.json"} <= set(listed), listed
    local = shared_state / on_server.get_run(result.run_id).data.tags["grpolab.final_model"]
    assert listed["model/model.safetensors"] == (local / "model.safetensors").stat().st_size
