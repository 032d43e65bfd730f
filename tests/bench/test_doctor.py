"""`grpolab doctor --gpu`: on this CPU machine every GPU check is reported "not checked" with its
reason and the command exits 0, without importing torch when there is no GPU driver. With a
faked CUDA probe and no vLLM, the checks that need only transformers run (faked here: ok or a
specific failure) and the vLLM rows say why they were not checked. The GPU code path itself runs
on the CPU through the vLLM stand-in (tests/vllm_double.py), training on the CPU: that covers the
checks' wiring, the micro-ladders' studies and the timing's settings; it says nothing about real
vLLM, CUDA kernels, bf16 on a GPU or the figures a GPU gives."""

import json
import subprocess
import sys

import pytest
import vllm_double

from grpolab import cli
from grpolab.bench.gpu_check import GpuChecks, GpuProbe, gpu_report


NO_DRIVER = "/nonexistent/grpolab-test/nvidia"


def _rows(report: dict) -> dict:
    return {k: v["status"] for k, v in report.items() if isinstance(v, dict) and "status" in v}


def _expected_rows() -> list[str]:
    from grpolab.method.registry import METHODS
    methods = [f"method:{k}" for k, m in METHODS.items() if not m.missing]
    return ["gpu", *methods, "micro_ladder", "trainer_timing", "vllm_import", "vllm_load", "vllm_micro_ladder",
            "vllm_trainer_timing"]


def test_on_a_cpu_machine_every_gpu_check_is_not_checked_and_it_exits_0_without_importing_torch(tmp_path):
    """No GPU driver (the markers point nowhere, so this holds on a GPU machine too): every row,
    one per registered method included, reads "not checked" with the reason, and torch is never
    imported; the report still names torch's version and its CUDA build, read from its files."""
    out = tmp_path / "report.json"
    code = ("import sys, time; start = time.monotonic(); from grpolab import cli; from grpolab.bench import gpu_check; "
            f"gpu_check.DRIVER_MARKERS = ({NO_DRIVER!r},); "
            f"code = cli.main(['--state', {str(tmp_path / 'state')!r}, 'doctor', '--gpu', '--out', {str(out)!r}]); "
            "print('EXIT', code, 'torch' in sys.modules, round(time.monotonic() - start, 2))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    exit_line = done.stdout.strip().splitlines()[-1].split()
    assert exit_line[:3] == ["EXIT", "0", "False"], done.stdout + done.stderr
    report = json.loads(out.read_text())
    reason = f"not checked: no CUDA device: no GPU driver on this machine (none of {NO_DRIVER} exists)"
    rows = _rows(report)
    assert list(rows) == _expected_rows() and len(rows) > 30
    assert set(rows.values()) == {reason}
    for name in rows:
        assert f"{name}: {reason}" in done.stdout
    import torch
    assert report["ran_on"] == {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": []}
    assert report["versions"]["torch"] == torch.__version__ and report["versions"]["trl"] == "1.16.0"
    assert f"ran on: torch {torch.__version__}, CUDA " in done.stdout
    assert done.stdout.strip().splitlines()[-2] == f"report: {out}"


def test_a_driver_without_a_cuda_device_fails_the_gpu_check_and_exits_1(tmp_path, monkeypatch, capsys):
    """A GPU driver is there (faked by a marker file) but torch sees no CUDA device: that is a
    broken GPU machine, so the gpu row fails with torch's own answer (a CPU build of torch is
    named as one), every other row says it was not checked because of it, and the command exits 1."""
    import torch

    from grpolab.bench import gpu_check
    marker = tmp_path / "version"
    marker.write_text("NVRM version: fake")
    monkeypatch.setattr(gpu_check, "DRIVER_MARKERS", (str(marker),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    probe = gpu_check.probe_cuda()
    assert probe.count == 0 and probe.torch == torch.__version__
    assert probe.why_not.startswith("no CUDA device: torch.cuda.is_available() is False")
    if torch.version.cuda is None:
        assert probe.why_not.endswith(f"torch {torch.__version__} is a CPU build (torch.version.cuda is None)")
    report = gpu_report(tmp_path / "r.json", tmp_path / "state", GpuChecks(methods=["grpo"]), probe=probe)
    rows = _rows(report)
    assert rows.pop("gpu") == f"failed: a GPU driver is installed but {probe.why_not}"
    assert set(rows.values()) == {"not checked: the gpu check failed"} and "method:grpo" in rows
    out = tmp_path / "cli.json"
    assert cli.main(["--state", str(tmp_path / "state"), "doctor", "--gpu", "--out", str(out)]) == 1
    assert "gpu: failed: a GPU driver is installed but no CUDA device" in capsys.readouterr().out


def test_argument_errors_are_answered_without_importing_torch(tmp_path):
    code = ("import sys; from grpolab import cli; code = cli.main(['doctor', '--gpu', '--model', "
            f"'{tmp_path / 'none'}']); print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert f"--model: {tmp_path / 'none'} is not a folder" in done.stderr


@pytest.mark.slow
def test_the_gpu_path_through_the_vllm_stand_in(tmp_path, shared_state, monkeypatch):
    from grpolab.bench import gpu_training
    from grpolab.experiment import engines
    vllm_double.install(monkeypatch)
    # torch emulates bf16 autocast on any CPU; grpolab's guard asks for AVX512-BF16 / AMX, which a GPU replaces
    monkeypatch.setattr(engines, "bf16_supported", lambda: True)
    probe = GpuProbe(1, ("Fake GPU",), (80.0,), torch="2.13.0", cuda="13.0", use_cpu=True)
    timed = gpu_training.timing   # transformers timing: vLLM's but for settings checked elsewhere in this file
    monkeypatch.setattr(gpu_training, "timing", lambda *a, vllm=False: timed(*a, vllm=True) if vllm else
                        {"bf16": {"stock_trl_s_per_step": 1.0, "grpolab_s_per_step": 1.0}})
    report = gpu_report(tmp_path / "report.json", shared_state,
                        GpuChecks(steps=2, methods=["grpo"], timing_shape="tiny-64"), probe=probe)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(report, default=str))
    names = ("gpu", "method:grpo", "micro_ladder", "trainer_timing", "vllm_import", "vllm_load", "vllm_micro_ladder",
             "vllm_trainer_timing")
    assert _rows(report) == dict.fromkeys(names, "ok"), report
    assert report["gpu"]["training_on"] == "cpu (faked GPU)"
    assert report["method:grpo"]["steps"] == 2 and report["method:grpo"]["device"] == "cpu"
    assert report["vllm_load"]["generated_tokens"] >= 1
    assert report["micro_ladder"]["rows"] == report["vllm_micro_ladder"]["rows"] == 4
    assert report["micro_ladder"]["generation"] == "transformers"
    for name in ("trainer_timing", "vllm_trainer_timing"):
        timing = report[name]["bf16"]
        assert timing["stock_trl_s_per_step"] > 0 and timing["grpolab_s_per_step"] > 0
    generated = [c for c in vllm_double.ENGINE_LOG if c["kind"] == "generate"]
    assert generated   # the vLLM ladder and timing sampled from the (stand-in) engine


def test_without_vllm_a_cuda_machine_runs_every_other_check(tmp_path, monkeypatch, capsys):
    """A faked CUDA probe and no vLLM: every method row, the transformers micro-ladder and the timing
    run (their functions faked: one method fails, so the command exits 1 naming it), and each vLLM row
    says it was not checked because vLLM does not load."""
    from grpolab.bench import gpu_check, gpu_training
    from grpolab.experiment import engines
    calls = []

    def train_method(key, state, use_cpu):
        assert use_cpu is False   # a real probe: the method rows must train on CUDA
        calls.append(key)
        if key == "spo":
            raise RuntimeError("Expected all tensors to be on the same device, cuda:0 and cpu")
        return {"steps": 2, "loss": 0.5, "device": "cuda:0"}

    monkeypatch.setattr(gpu_check, "probe_cuda", lambda: GpuProbe(1, ("Fake H200",), (139.8,), torch="2.11.0+cu130",
                                                                    cuda="13.0"))
    monkeypatch.setattr(gpu_check, "_free_cuda", lambda: None)
    monkeypatch.setattr(engines, "vllm_installed", lambda: False)
    monkeypatch.setattr(gpu_check, "_model", lambda folder, model_dir: {"path": str(folder / "model")})
    monkeypatch.setattr(gpu_training, "train_method", train_method)
    monkeypatch.setattr(gpu_training, "micro_ladder", lambda folder, state, model, steps, backend="transformers":
                        {"rows": 4, "generation": backend, "model": model})
    monkeypatch.setattr(gpu_training, "timing", lambda folder, shape, steps, repeats, use_cpu, vllm=False:
                        {"shape": shape, "bf16": {"ratio": 0.9}, "vllm": vllm})
    out = tmp_path / "report.json"
    assert cli.main(["--state", str(tmp_path / "state"), "doctor", "--gpu", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    rows = _rows(report)
    assert list(rows) == _expected_rows()
    methods = [name.removeprefix("method:") for name in rows if name.startswith("method:")]
    assert calls == methods
    assert rows["method:spo"] == "failed: RuntimeError: Expected all tensors to be on the same device, cuda:0 and cpu"
    assert "Traceback" in report["method:spo"]["traceback"]
    assert all(rows[f"method:{key}"] == "ok" for key in methods if key != "spo")
    assert rows["micro_ladder"] == rows["trainer_timing"] == rows["gpu"] == "ok"
    assert report["micro_ladder"]["generation"] == "transformers"
    assert report["trainer_timing"]["shape"] == "qwen2.5-0.5b" and report["trainer_timing"]["vllm"] is False
    for name in ("vllm_import", "vllm_load", "vllm_micro_ladder", "vllm_trainer_timing"):
        assert rows[name] == ("not checked: vLLM does not load: it is not installed (importlib.util.find_spec('vllm') "
                              "is None; pip install 'grpolab[gpu]')")
    assert report["ran_on"] == {"torch": "2.11.0+cu130", "cuda": "13.0", "devices": ["Fake H200"]}
    assert printed.splitlines()[0] == "ran on: torch 2.11.0+cu130, CUDA 13.0, Fake H200"
    assert "method:spo: failed: RuntimeError" in printed and "micro_ladder: ok" in printed
    monkeypatch.setattr(gpu_training, "train_method", lambda key, state, use_cpu: {"steps": 2})
    assert cli.main(["--state", str(tmp_path / "state"), "doctor", "--gpu", "--out", str(out)]) == 0


def test_every_method_row_builds_a_bf16_two_step_config_and_the_timing_has_the_05b_shape(tmp_path, monkeypatch):
    """The method rows' configs validate for every registered method; the timing hands bench_trainer
    the Qwen2.5-0.5B body (counted on the meta device), 128-token completions held to full length."""
    import torch
    from transformers import AutoModelForCausalLM

    from grpolab.bench import gpu_training, suite
    from grpolab.experiment import engines
    monkeypatch.setattr(engines, "bf16_supported", lambda: True)   # as on a GPU; this CPU may lack AVX512-BF16
    for key in gpu_training.runnable_methods():
        cfg = gpu_training.method_config(key)
        assert (cfg.train.steps, cfg.train.dtype, cfg.tracking.enabled) == (2, "bf16", False), key
    shape = gpu_training.SHAPES["qwen2.5-0.5b"]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(gpu_training.shape_config(shape, 57))
    body = sum(p.numel() for name, p in model.named_parameters() if "embed" not in name and "lm_head" not in name)
    # per layer: q, o 896x896; k, v 896x128 (2 heads of 64); MLP 3 x 896x4864; two RMSNorms of 896
    assert body == 24 * (2 * 896 * 896 + 2 * 896 * 128 + 3 * 896 * 4864 + 2 * 896) + 896 == 357_870_464
    seen = {}
    monkeypatch.setattr(gpu_training, "shape_model", lambda folder, shape: folder / "m")
    monkeypatch.setattr(suite, "bench_trainer",
                        lambda *a, both, **kw: seen.update(args=a, **both._asdict(), **kw) or {"bf16": {}})
    out = gpu_training.timing(tmp_path, "qwen2.5-0.5b", 4, 1, use_cpu=False)
    assert out["completions_per_step"] == 64 and out["shape"]["hidden"] == 896
    assert seen["extra_args"] == {"max_completion_length": 128, "generation_kwargs": {"min_new_tokens": 128}}
    assert seen["precisions"] == ("bf16",) and seen["use_cpu"] is False and seen["model_dir"] == tmp_path / "m"
    gpu_training.timing(tmp_path, "qwen2.5-0.5b", 4, 1, use_cpu=False, vllm=True)
    assert seen["extra_args"]["generation_kwargs"] == {"min_tokens": 128} and seen["extra_args"]["use_vllm"] is True


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


def test_a_method_row_that_trained_on_the_cpu_fails_unless_the_gpu_is_faked(tmp_path, monkeypatch):
    """Both steps ran with finite losses, but the model sat on the CPU: on a GPU machine that is a
    failure (the run fell back to the CPU), so the row must say so; the faked-GPU stand-in may."""
    import torch
    from types import SimpleNamespace

    from grpolab.bench import gpu_training
    from grpolab.experiment import engines, runner

    def run_experiment(cfg, state, callbacks):
        model = torch.nn.Linear(1, 1)
        for callback in callbacks:
            callback.on_train_begin(None, None, None, model=model)
            for loss in (0.5, 0.25):
                callback.on_log(None, None, None, logs={"loss": loss})
        return SimpleNamespace(steps=2)

    monkeypatch.setattr(runner, "run_experiment", run_experiment)
    monkeypatch.setattr(engines, "bf16_supported", lambda: True)   # the config is bf16; this CPU may lack it
    with pytest.raises(RuntimeError, match="the model trained on cpu, not on a CUDA device"):
        gpu_training.train_method("grpo", tmp_path)
    assert gpu_training.train_method("grpo", tmp_path, use_cpu=True) == {"steps": 2, "loss": 0.25, "device": "cpu"}


def test_the_micro_ladder_counts_the_rows_its_study_completed(tmp_path, monkeypatch):
    """A study that exits 0 having completed no row (here: run_study does nothing) fails the check."""
    from grpolab.bench import gpu_training
    from grpolab.experiment import engines
    from grpolab.studies import coordinator
    monkeypatch.setattr(coordinator, "run_study", lambda *a, **kw: 0)
    monkeypatch.setattr(engines, "bf16_supported", lambda: True)
    with pytest.raises(RuntimeError, match="micro-ladder completed 0 of its 4 rows"):
        gpu_training.micro_ladder(tmp_path, tmp_path / "state", {"preset": "tiny"}, 2)


def test_vllm_load_fails_when_no_token_is_generated(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import transformers
    from trl.generation import vllm_generation

    from grpolab.bench import gpu_check
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0" if key != "MASTER_ADDR" else "localhost")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda path: lambda text: {"input_ids": [1, 2]})
    tokens: list = []

    class LLM:
        def __init__(self, model, **kw):
            pass

        def generate(self, prompts, params, use_tqdm):
            return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=list(tokens))])]

    monkeypatch.setattr(vllm_generation, "LLM", LLM, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda max_tokens: None, raising=False)
    with pytest.raises(RuntimeError, match="generated no token"):
        gpu_check._vllm_load(tmp_path)
    tokens[:] = [5, 6, 7]
    assert gpu_check._vllm_load(tmp_path) == {"model": str(tmp_path), "generated_tokens": 3}
