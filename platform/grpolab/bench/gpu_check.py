"""``grpolab doctor --gpu``: one command that says whether a GPU machine can run grpolab, and how
fast, in one JSON report.

Checks, in order (each is ``ok``, ``failed: <why>`` or ``not checked: <why>``):

- gpu: the CUDA devices torch sees (name, memory);
- versions: torch, vLLM, TRL, transformers, accelerate, deepspeed as installed (read from the
  package metadata: nothing is imported for it);
- vllm_import / vllm_load: vLLM as TRL 1.16 imports it (``trl.generation.vllm_generation``), then
  an ``LLM`` loaded from a tiny model this command builds (or ``--model DIR``), in bf16, and one
  prompt generated;
- micro_ladder: a 2-rung x 2-seed ladder (GRPO, then + clip-higher) on that model, with vLLM
  colocate generation and ``train.dtype: bf16``, run as ``grpolab study`` runs it, in this
  state folder;
- trainer_timing: stock TRL GRPOTrainer against GrpoLabTrainer on the same settings (bf16, vLLM
  colocate), seconds per optimizer step (bench/suite.py's alternation).

Without a CUDA device every check but versions is reported ``not checked`` and the command exits
0: a CPU machine is not broken, it is simply not the machine this checks.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("torch", "vllm", "trl", "transformers", "accelerate", "deepspeed")
NO_GPU = "no CUDA device (torch.cuda.is_available() is False)"


@dataclass(frozen=True)
class GpuProbe:
    """What the machine offers. ``use_cpu``: train on the CPU although a GPU was reported, which
    only a test that fakes the GPU (with the vLLM stand-in) asks for."""
    count: int
    names: tuple[str, ...] = ()
    memory_gib: tuple[float, ...] = ()
    use_cpu: bool = False


def probe_cuda() -> GpuProbe:
    import torch
    if not torch.cuda.is_available():
        return GpuProbe(0)
    count = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    return GpuProbe(count, tuple(p.name for p in props), tuple(round(p.total_memory / 2**30, 1) for p in props))


def versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _check(report: dict, name: str, run) -> bool:
    """Run one check into ``report[name]``: its result dict (status ok) or why it failed."""
    started = time.monotonic()
    try:
        report[name] = {"status": "ok", **run()}
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, the next ones still run
        report[name] = {"status": f"failed: {type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(limit=8)}
    report[name]["seconds"] = round(time.monotonic() - started, 2)
    return report[name]["status"] == "ok"


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
    return {"model": str(model_dir), "generated_tokens": tokens}


def colocate_llm_kwargs(gpu_memory_utilization: float = 0.3) -> dict:
    """The keywords TRL 1.16's colocate mode builds its ``LLM`` with (TRL's vLLM
    generation module, one process, no tensor parallelism, no quantization), so the check loads
    vLLM the way a run will (max_num_seqs: TRL passes the rollout batch; 16 is the micro-ladder's)."""
    return {"tensor_parallel_size": 1, "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": 256,
            "max_num_seqs": 16, "enable_sleep_mode": False, "model_impl": "vllm",
            "distributed_executor_backend": "external_launcher", "seed": 0, "max_num_batched_tokens": 4096,
            "logprobs_mode": "processed_logprobs", "quantization": None, "trust_remote_code": False}


def micro_ladder_file(folder: Path, model: dict, steps: int) -> Path:
    import yaml
    row = {"method": {"base": "grpo"}, "task": {"name": "addition", "digits": 2}, "model": model,
           "warm_start": {"enabled": False},
           "train": {"steps": steps, "group_size": 4, "prompts_per_rollout": 4, "dtype": "bf16", "save_every": 0},
           "eval": {"every": steps, "prompts": 8, "k": 2},
           "generation": {"backend": "vllm", "mode": "colocate"}, "tracking": {"experiment": "grpolab-doctor"}}
    # a name of its own each time: a second check runs its rows again rather than finding them done
    name = f"doctor_micro_ladder_{time.strftime('%Y%m%d_%H%M%S')}_{folder.name[-6:]}"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"kind": "ladder", "name": name, "base": row, "seeds": [0, 1],
                                    "rungs": [{"name": "grpo"},
                                              {"name": "+ clip-higher", "changes": {"method.eps_high": 0.28}}]}))
    return path


def _micro_ladder(folder: Path, state: Path, model: dict, steps: int) -> dict:
    from grpolab.studies.coordinator import run_study
    lines: list[str] = []
    path = micro_ladder_file(folder, model, steps)
    code = run_study(str(path), state, None, 1, True, echo=lines.append)
    if code != 0:
        raise RuntimeError(f"the micro-ladder exited {code}: " + " | ".join(lines[-5:]))
    return {"study": str(path), "rows": 4, "steps_per_row": steps, "lines": lines[-3:]}


def _timing(steps: int, repeats: int, use_cpu: bool) -> dict:
    from grpolab.bench.suite import bench_trainer
    colocate = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3,
                "vllm_enable_sleep_mode": False}
    return bench_trainer("tiny", steps, repeats, use_cpu=use_cpu, precisions=("bf16",), dropin=False,
                         extra_args=colocate)


def gpu_report(out: Path, state: Path, model_dir: str | None = None, steps: int = 4, repeats: int = 1,
               probe: GpuProbe | None = None) -> dict:
    """Every check into one report dict, written to ``out`` as JSON."""
    probe = probe_cuda() if probe is None else probe
    report: dict = {"report": str(out), "versions": versions()}
    checks = ("vllm_import", "vllm_load", "micro_ladder", "trainer_timing")
    if not probe.count:
        report["gpu"] = {"status": f"not checked: {NO_GPU}"}
        for name in checks:
            report[name] = {"status": f"not checked: {NO_GPU}"}
    else:
        report["gpu"] = {"status": "ok", "count": probe.count, "names": list(probe.names),
                         "memory_gib": list(probe.memory_gib), "training_on": "cpu (faked GPU)" if probe.use_cpu
                         else "cuda"}
        folder = Path(tempfile.mkdtemp(prefix="grpolab-doctor-"))
        model = _model(folder, model_dir)
        loads = _check(report, "vllm_import", _vllm_import) and _check(
            report, "vllm_load", lambda: _vllm_load(Path(model["path"])))
        if loads:
            _check(report, "micro_ladder", lambda: _micro_ladder(folder, state, model, steps))
            _check(report, "trainer_timing", lambda: _timing(steps, repeats, probe.use_cpu))
        else:
            for name in ("micro_ladder", "trainer_timing"):
                report.setdefault(name, {"status": "not checked: vLLM does not load (see vllm_import / vllm_load)"})
        report.setdefault("vllm_load", {"status": "not checked: vLLM does not import (see vllm_import)"})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    return report


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
    return [f"versions: {found}", *lines, f"report: {report['report']}"]
