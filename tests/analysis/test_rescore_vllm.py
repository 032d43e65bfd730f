"""`grpolab eval` on a run that generated with vLLM re-scores it through vLLM, the engine path the
run used (colocate: an engine loading the saved model; server: the run's server with the saved
weights pushed into it), never silently through transformers generate; without vLLM it is refused.

vLLM cannot run here (no CUDA, no vLLM wheel): these tests use the project's vLLM stand-in, the
test double of vLLM's ``LLM`` and TRL's ``VLLMClient`` in tests/vllm_double.py, not vLLM itself."""

import pytest
import torch
from mlflow.tracking import MlflowClient

import vllm_double
from conftest import share_models
from grpolab.cli import main
from grpolab.experiment.config import build_config
from grpolab.experiment.runner import run_experiment
from grpolab.world import generation
from grpolab.world.models import load_model

BENCH = ["--benchmark", "held_out", "--n", "3", "--size", "2", "--max-tokens", "7", "--temperature", "0.7"]


def _config(mode: str):
    # a coin-flip reward gives the untrained model non-zero advantages: training moves the saved weights
    return build_config({
        "name": f"rescore-vllm-{mode}", "method": {"base": "grpo"}, "task": {"name": "random_reward", "digits": 2},
        "model": {"preset": "tiny"}, "warm_start": {"enabled": False}, "seed": 5,
        "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 2, "learning_rate": 0.3, "save_every": 0,
                  "max_completion_length": 8, "temperature": 0.9, "trl": {"top_k": 7}},
        "eval": {"every": 0, "prompts": 4, "k": 1},
        "generation": {"backend": "vllm", "mode": mode, "server_base_url": "http://vllm.invalid:8000"}})


@pytest.fixture(scope="module", params=["colocate", "server"])
def vllm_run(request, tmp_path_factory):
    """(mode, state, run id, its run folder, the model it started from) of a 2-step run trained under
    the vLLM stand-in."""
    from grpolab.experiment.starting_model import resolve_model_once
    from grpolab.tasks import make_task
    from grpolab.tracking.stores import prepare_stores
    state = share_models(tmp_path_factory.mktemp(f"rescore-vllm-{request.param}"), tmp_path_factory)
    prepare_stores(state)
    with pytest.MonkeyPatch.context() as mp:
        vllm_double.install(mp)
        cfg = _config(request.param)
        model_dir, _ = resolve_model_once(cfg, make_task("random_reward", digits=2), state)
        vllm_double.VLLMClient.MODEL_PATH = str(model_dir)   # what the run's `trl vllm-serve` serves
        result = run_experiment(cfg, state)
    return request.param, state, result.run_id, state / "runs" / result.run_id, model_dir


def _nested(state, run_id):
    from grpolab.tracking.recorder import tracking_uri
    client = MlflowClient(tracking_uri(state))
    parent = client.get_run(run_id)
    return client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")


def test_a_vllm_run_is_rescored_through_the_stand_in_with_its_sampling_settings(vllm_run, monkeypatch):
    mode, state, run_id, folder, start = vllm_run
    vllm_double.install(monkeypatch, served_model=str(start))   # the server serves the start: the saved weights are pushed
    monkeypatch.setattr(generation, "sample", lambda *a, **k: pytest.fail("re-scored with transformers generate"))
    assert main(["--state", str(state), "eval", run_id, *BENCH]) == 0
    calls = [c for c in vllm_double.ENGINE_LOG if c["kind"] == "generate"]
    # 2 prompts x 3 samples at the benchmark's settings, the run's top_k, seeded from the run seed (5)
    assert [(c["n"], c["max_tokens"], c["temperature"], c["top_p"], c["top_k"]) for c in calls] == \
        [(3, 7, 0.7, 1.0, 7)] * len(calls)
    assert sum(c["prompts"] for c in calls) == 2
    assert [c["seed"] for c in calls] == ([5, 8] if mode == "colocate" else [5])   # per prompt / one request
    # the engine sampled the saved final model: its weights, not the served base model's
    final, _ = load_model(folder / "final")
    assert not all(torch.equal(a, b) for a, b in zip(load_model(start)[0].parameters(), final.parameters()))
    engine = vllm_double.ENGINES[-1].model
    assert all(torch.equal(a, b) for a, b in zip(engine.parameters(), final.parameters()))
    if mode == "server":
        assert [c["names"] for c in vllm_double.ENGINE_LOG if c["kind"] == "load_weights"] == \
            [len(list(final.parameters()))]
    # the nested run holds the stand-in's numbers
    (nested,) = _nested(state, run_id)
    lengths = [n for c in calls for n in c["lengths"]]
    assert len(lengths) == 6
    assert nested.data.metrics["eval/held_out/mean_length"] == pytest.approx(sum(lengths) / 6)
    assert nested.data.tags["grpolab.eval.step"] == "2" and nested.data.metrics["eval/held_out/avg_at_3"] in \
        {i / 6 for i in range(7)}
    # seeded requests: the same model and settings give the same numbers again
    assert main(["--state", str(state), "eval", run_id, *BENCH]) == 0
    again = [r for r in _nested(state, run_id) if r.info.run_id != nested.info.run_id]
    assert again[0].data.metrics == nested.data.metrics


def test_without_vllm_a_vllm_run_is_refused_in_one_line(vllm_run, capsys):
    mode, state, run_id, _, _ = vllm_run
    before = len(_nested(state, run_id))
    assert main(["--state", str(state), "eval", run_id, *BENCH]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"error: run {run_id}: the run generated with vLLM (generation.backend: vllm, mode {mode}), so grpolab eval "
        "re-scores it through vLLM, which is not installed here; run it on a CUDA machine with vLLM "
        "(pip install 'grpolab[gpu]')")
    assert len(_nested(state, run_id)) == before   # nothing recorded
