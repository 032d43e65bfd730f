"""`grpolab doctor --gpu`: on this CPU machine every GPU check is reported "not checked" and the
command exits 0; its GPU code path runs here through the vLLM stand-in (tests/vllm_double.py)
with a faked GPU probe, training on the CPU. That covers the checks' wiring, the micro-ladder's
study (vLLM colocate, bf16) and the timing's settings; it says nothing about real vLLM, CUDA
kernels, bf16 on a GPU or the figures a GPU gives."""

import json
import subprocess
import sys

import pytest
import vllm_double

from grpolab import cli
from grpolab.bench.gpu_check import GpuProbe, gpu_report


def test_on_a_cpu_machine_every_gpu_check_is_not_checked_and_it_exits_0(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert cli.main(["--state", str(tmp_path / "state"), "doctor", "--gpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    reason = "not checked: no CUDA device (torch.cuda.is_available() is False)"
    for name in ("gpu", "vllm_import", "vllm_load", "micro_ladder", "trainer_timing"):
        assert report[name]["status"] == reason and f"{name}: {reason}" in printed
    assert report["versions"]["torch"].startswith("2.13") and report["versions"]["trl"] == "1.16.0"
    assert printed.rstrip().endswith(f"report: {out}")


def test_argument_errors_are_answered_without_importing_torch(tmp_path):
    code = ("import sys; from grpolab import cli; code = cli.main(['doctor', '--gpu', '--model', "
            f"'{tmp_path / 'none'}']); print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert f"--model: {tmp_path / 'none'} is not a folder" in done.stderr


@pytest.mark.slow
def test_the_gpu_path_through_the_vllm_stand_in(tmp_path, shared_state, monkeypatch):
    vllm_double.install(monkeypatch)
    probe = GpuProbe(1, ("Fake GPU",), (80.0,), use_cpu=True)
    report = gpu_report(tmp_path / "report.json", shared_state, steps=2, probe=probe)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(report, default=str))
    statuses = {k: v["status"] for k, v in report.items() if isinstance(v, dict) and "status" in v}
    assert statuses == dict.fromkeys(("gpu", "vllm_import", "vllm_load", "micro_ladder", "trainer_timing"), "ok"), report
    assert report["gpu"]["training_on"] == "cpu (faked GPU)"
    assert report["vllm_load"]["generated_tokens"] >= 1
    assert report["micro_ladder"]["rows"] == 4
    timing = report["trainer_timing"]["bf16"]
    assert timing["stock_trl_s_per_step"] > 0 and timing["grpolab_s_per_step"] > 0
    generated = [c for c in vllm_double.ENGINE_LOG if c["kind"] == "generate"]
    assert generated   # the ladder and the timing sampled from the (stand-in) engine


def test_a_failed_check_on_a_cuda_machine_exits_1(tmp_path, monkeypatch, capsys):
    """A faked GPU and no vLLM installed here: vllm_import fails, so `make gpu-check` must fail."""
    from grpolab.bench import gpu_check
    monkeypatch.setattr(gpu_check, "probe_cuda", lambda: GpuProbe(1, ("Fake GPU",), (80.0,), use_cpu=True))
    out = tmp_path / "report.json"
    assert cli.main(["--state", str(tmp_path / "state"), "doctor", "--gpu", "--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["vllm_import"]["status"].startswith("failed: RuntimeError: TRL does not find vLLM")
    assert report["micro_ladder"]["status"].startswith("not checked")
    assert "vllm_import: failed" in capsys.readouterr().out


def test_the_doctors_model_has_heads_of_64_and_vllm_is_loaded_with_trls_colocate_keywords(tmp_path):
    import inspect
    import re
    from trl.generation import vllm_generation
    from grpolab.bench.gpu_check import _model, colocate_llm_kwargs
    model = _model(tmp_path, None)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert model == {"path": str(tmp_path / "model")}
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 64
    source = inspect.getsource(vllm_generation)
    call = source[source.index("self.llm = LLM("):]
    call = call[:call.index("\n            )")]
    trl_keywords = set(re.findall(r"^\s+(\w+)=", call, re.M)) - {"model"}
    assert set(colocate_llm_kwargs()) == trl_keywords
    assert colocate_llm_kwargs()["distributed_executor_backend"] == "external_launcher"
