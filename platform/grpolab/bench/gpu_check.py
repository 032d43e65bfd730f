"""``grpolab doctor --gpu``: one command that says whether a GPU machine can run grpolab, and how
fast, in one JSON report. vLLM is one part of the report, not a gate: without it every check
that needs only transformers still runs.

Detail: docs/clusters-and-gpus.md, "grpolab.bench.gpu_check".
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import json
import re
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from grpolab.bench import gpu_training
from grpolab.experiment import engines

PACKAGES = ("torch", "vllm", "trl", "transformers", "accelerate", "deepspeed")
# files a GPU driver creates (NVIDIA, NVIDIA under WSL2, AMD ROCm): without any, torch cannot see a GPU
DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")
NO_CUDA = "no CUDA device: torch.cuda.is_available() is False"
VLLM_CHECKS = ("vllm_import", "vllm_load", "vllm_micro_ladder", "vllm_trainer_timing")
NO_VLLM = ("vLLM does not load: it is not installed (importlib.util.find_spec('vllm') is None; "
           "pip install 'grpolab[gpu]')")


@dataclass(frozen=True)
class GpuProbe:
    """What the machine offers. ``torch`` / ``cuda``: torch's version and the CUDA version it was
    built for; ``why_not``: with no device, the reason. ``use_cpu``: train on the CPU although a
    GPU was reported, which only a test that fakes the GPU asks for."""
    count: int
    names: tuple[str, ...] = ()
    memory_gib: tuple[float, ...] = ()
    torch: str | None = None
    cuda: str | None = None
    why_not: str = ""
    use_cpu: bool = False
    broken: bool = False   # a GPU driver is there but torch cannot use it: the machine doctor exists to catch


def torch_build() -> tuple[str | None, str | None]:
    """torch's version and its CUDA version (None: a CPU build), read from torch/version.py
    without importing torch (about 4 s on a small CPU machine); (None, None) without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", text, re.M)
    return (version.group(1) if version else None), (cuda.group(1) if cuda else None)


def probe_cuda() -> GpuProbe:
    version, cuda = torch_build()
    markers = DRIVER_MARKERS
    if version is None:
        return GpuProbe(0, why_not="torch is not installed (importlib.util.find_spec('torch') is None)")
    if not any(Path(marker).exists() for marker in markers):
        return GpuProbe(0, torch=version, cuda=cuda, why_not=(
            f"no CUDA device: no GPU driver on this machine (none of {', '.join(markers)} exists)"))
    import torch
    if not torch.cuda.is_available():
        build = "" if torch.version.cuda else f"; torch {torch.__version__} is a CPU build (torch.version.cuda is None)"
        return GpuProbe(0, torch=torch.__version__, cuda=torch.version.cuda, why_not=NO_CUDA + build, broken=True)
    count = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    return GpuProbe(count, tuple(p.name for p in props), tuple(round(p.total_memory / 2**30, 1) for p in props),
                    torch=torch.__version__, cuda=torch.version.cuda)


def versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _check(report: dict, name: str, run, probe: GpuProbe) -> bool:
    """Run one check into ``report[name]``: its result dict (status ok) or why it failed; then
    hand its cached CUDA memory back, so vLLM's share of the GPU is free when its checks start."""
    started = time.monotonic()
    try:
        report[name] = {"status": "ok", **run()}
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, the next ones still run
        report[name] = {"status": f"failed: {type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(limit=8)}
    report[name]["seconds"] = round(time.monotonic() - started, 2)
    if not probe.use_cpu:
        _free_cuda()
    return report[name]["status"] == "ok"


def _free_cuda() -> None:
    import gc

    import torch
    gc.collect()
    torch.cuda.empty_cache()


def _vllm_import() -> dict:
    from trl.generation import vllm_generation
    if not vllm_generation.is_vllm_available():
        raise RuntimeError("TRL does not find vLLM (pip install 'grpolab[gpu]')")
    return {"detail": "trl.generation.vllm_generation finds vLLM"}


def _vllm_load(model_dir: Path) -> dict:
    """An engine built with the keywords TRL's colocate mode passes, and one prompt's tokens."""
    import os
    from transformers import AutoTokenizer
    from trl.generation import vllm_generation
    ids = AutoTokenizer.from_pretrained(str(model_dir))("12+34=")["input_ids"]
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):   # as TRL sets them
        os.environ.setdefault(key, value)
    vllm_generation.ensure_master_addr_port()
    llm = vllm_generation.LLM(model=str(model_dir), **colocate_llm_kwargs())
    outputs = llm.generate([{"prompt_token_ids": ids}], vllm_generation.SamplingParams(max_tokens=8), use_tqdm=False)
    tokens = len(outputs[0].outputs[0].token_ids)
    del llm
    if tokens == 0:
        raise RuntimeError("vLLM loaded the model but generated no token for the prompt (want 1 to 8)")
    return {"model": str(model_dir), "generated_tokens": tokens}


def colocate_llm_kwargs(gpu_memory_utilization: float = 0.3) -> dict:
    """The keywords TRL 1.16's colocate mode builds its ``LLM`` with (TRL's vLLM
    generation module, one process, no tensor parallelism, no quantization), so the check loads
    vLLM the way a run will (max_num_seqs: TRL passes the rollout batch; 16 is the micro-ladder's)."""
    return {"tensor_parallel_size": 1, "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": 256,
            "max_num_seqs": 16, "enable_sleep_mode": False, "model_impl": "vllm",
            "distributed_executor_backend": "external_launcher", "seed": 0, "max_num_batched_tokens": 4096,
            "logprobs_mode": "processed_logprobs", "quantization": None, "trust_remote_code": False}


@dataclass(frozen=True)
class GpuChecks:
    """What the GPU checks run: the model (None: a tiny Llama built for them), the micro-ladder's
    and the timing's steps and repeats, the method rows, and the timed model shape."""
    model_dir: str | None = None
    steps: int = 4
    repeats: int = 1
    methods: list[str] | None = None        # None: every registered runnable method
    timing_shape: str = "qwen2.5-0.5b"      # a key of gpu_training.SHAPES


def gpu_report(out: Path, state: Path, checks: GpuChecks = GpuChecks(), probe: GpuProbe | None = None) -> dict:
    """Every check (``checks``) into one report dict, written to ``out`` as JSON."""
    probe = probe_cuda() if probe is None else probe
    methods = gpu_training.runnable_methods() if checks.methods is None else checks.methods
    report: dict = {"report": str(out), "ran_on": {"torch": probe.torch, "cuda": probe.cuda,
                                                   "devices": list(probe.names)}, "versions": versions()}
    if not probe.count:
        rest = (*(f"method:{key}" for key in methods), "micro_ladder", "trainer_timing", *VLLM_CHECKS)
        if probe.broken:   # a driver torch cannot use (CPU build, driver too old): a failure, not a CPU machine
            report["gpu"] = {"status": f"failed: a GPU driver is installed but {probe.why_not}"}
            for name in rest:
                report[name] = {"status": "not checked: the gpu check failed"}
        else:
            for name in ("gpu", *rest):
                report[name] = {"status": f"not checked: {probe.why_not}"}
    else:
        report["gpu"] = {"status": "ok", "count": probe.count, "names": list(probe.names),
                         "memory_gib": list(probe.memory_gib),
                         "training_on": "cpu (faked GPU)" if probe.use_cpu else "cuda"}
        _run_checks(report, probe, state, Path(tempfile.mkdtemp(prefix="grpolab-doctor-")),
                    dataclasses.replace(checks, methods=methods))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    return report


def _run_checks(report: dict, probe: GpuProbe, state: Path, folder: Path, checks: GpuChecks) -> None:
    """The checks of a machine with CUDA: transformers' first, then vLLM's when vLLM is installed."""
    model_dir, steps, repeats, methods, timing_shape = (checks.model_dir, checks.steps, checks.repeats, checks.methods,
                                                        checks.timing_shape)
    model = functools.cache(lambda: _model(folder, model_dir))   # built once, by the first check that needs it
    for key in methods:
        _check(report, f"method:{key}", lambda: gpu_training.train_method(key, state, use_cpu=probe.use_cpu), probe)
    _check(report, "micro_ladder", lambda: gpu_training.micro_ladder(folder, state, model(), steps), probe)
    _check(report, "trainer_timing",
           lambda: gpu_training.timing(folder, timing_shape, steps, repeats, probe.use_cpu), probe)
    if not engines.vllm_installed():
        for name in VLLM_CHECKS:
            report[name] = {"status": f"not checked: {NO_VLLM}"}
        return
    loads = _check(report, "vllm_import", _vllm_import, probe) and _check(
        report, "vllm_load", lambda: _vllm_load(Path(model()["path"])), probe)
    if not loads:
        report.setdefault("vllm_load", {"status": "not checked: vLLM does not import (see vllm_import)"})
        for name in ("vllm_micro_ladder", "vllm_trainer_timing"):
            report[name] = {"status": "not checked: vLLM does not load (see vllm_import / vllm_load)"}
        return
    _check(report, "vllm_micro_ladder",
           lambda: gpu_training.micro_ladder(folder, state, model(), steps, backend="vllm"), probe)
    _check(report, "vllm_trainer_timing",
           lambda: gpu_training.timing(folder, timing_shape, steps, repeats, probe.use_cpu, vllm=True), probe)


def _model(folder: Path, model_dir: str | None) -> dict:
    """The model the checks use: ``--model DIR`` (a local chat model), else a tiny Llama with
    attention heads of 64 (vLLM's FlashAttention kernels take head sizes 64 and up in steps of 32,
    not the tiny preset's 16), saved to ``folder/model`` for vLLM and the micro-ladder to load."""
    if model_dir:
        return {"path": str(Path(model_dir).resolve())}
    import torch
    from transformers import AutoModelForCausalLM
    from grpolab.world.models import preset_config, save_model
    from grpolab.world.tokenizer import build_char_tokenizer
    tokenizer = build_char_tokenizer()
    config = preset_config("tiny", len(tokenizer))
    config.hidden_size, config.num_attention_heads, config.num_key_value_heads = 128, 2, 2   # head size 64
    config.head_dim, config.intermediate_size = 64, 256
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    return {"path": str(save_model(model, tokenizer, folder / "model"))}


def any_failed(report: dict) -> bool:
    """A check that ran and failed (a CPU machine's "not checked" is no failure)."""
    return any(isinstance(v, dict) and str(v.get("status", "")).startswith("failed") for v in report.values())


def summary_lines(report: dict) -> list[str]:
    lines = [f"{name}: {value['status']}" for name, value in report.items() if isinstance(value, dict) and "status" in value]
    found = ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v)
    ran_on = report["ran_on"]
    devices = ", ".join(ran_on["devices"]) or "no CUDA device"
    return [f"ran on: torch {ran_on['torch']}, CUDA {ran_on['cuda'] or 'none (a CPU build of torch)'}, {devices}",
            f"versions: {found}", *lines, f"report: {report['report']}"]
