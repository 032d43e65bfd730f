"""Precision, memory and generation engines: grpolab's settings -> TRL's own paths, checked early.

Detail: docs/runs.md, "grpolab.experiment.engines".
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass

from grpolab.errors import ConfigError
from grpolab.planning import is_planning, plan_note, unmet_here
from grpolab.hub import cached as cached_hub
from grpolab.hub import looks_like_hub_id
from grpolab.method.sampler_corrections import NONE, SAMPLER_CORRECTIONS
from grpolab.method.sampler_corrections import trl_settings as sampler_trl_settings
from grpolab.method.surrogates import SURROGATES
from grpolab.world.models import PRESETS, preset_config
from grpolab.world.tokenizer import build_char_tokenizer

DTYPES = ("fp32", "bf16", "fp16")
BACKENDS = ("transformers", "vllm")
VLLM_MODES = ("colocate", "server")
LORA_KEYS = {"r": int, "alpha": (int, float), "target_modules": list, "dropout": (int, float)}


@dataclass(frozen=True)
class GenerationCfg:
    backend: str = "transformers"      # transformers (model.generate) | vllm (TRL's vLLM path, GPU, grpolab[gpu])
    mode: str = "colocate"             # vllm: colocate (in the training process) | server (`trl vllm-serve`)
    gpu_memory_utilization: float = 0.3    # vllm colocate: fraction of GPU memory for vLLM
    tensor_parallel_size: int = 1      # vllm colocate
    server_base_url: str | None = None # vllm server: e.g. http://host:8000
    enable_sleep_mode: bool = False    # vllm colocate: offload vLLM weights while training
    is_correction: str = "sequence_mask"   # importance-sampling correction of the vLLM/trainer mismatch
    is_max: float = 3.0                # upper bound C_max of the IS weight
    is_min: float = 0.0                # lower bound C_min (0: none)


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def real_vllm_installed() -> bool:
    """vLLM itself, whose colocate engine runs CUDA kernels (the tests' CPU stand-in of vLLM
    answers vllm_installed, not this)."""
    return importlib.util.find_spec("vllm") is not None


def bf16_supported() -> bool:
    """bf16 on the device this process trains on (trains_on_cuda): the GPU's, else the CPU's."""
    import torch  # lazy: a study's coordinator validates configs without loading torch (~2 s)
    if trains_on_cuda():
        return torch.cuda.is_bf16_supported()
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


# the ranks on this node, as each launcher names them: torchrun / accelerate, Slurm's srun, Open MPI's
# mpirun, Intel MPI / Horovod; WORLD_SIZE last (every rank of every node: an upper bound on this node's)
LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_SIZE", "WORLD_SIZE")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")


def _env_int(names: tuple[str, ...], default: int) -> tuple[int, str]:
    """The first of ``names`` set in the environment, as (value, name); (default, "") if none is."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            if not value.isdigit():
                raise ConfigError(f"environment variable {name}={value!r}: expected a whole number of ranks")
            return int(value), name
    return default, ""


def trains_on_cuda() -> bool:
    """Whether this process trains on CUDA (NCCL between ranks) rather than the CPU (gloo): CUDA is
    visible, each of this node's ranks (the first of LOCAL_SIZE_VARS set) has a device of its own,
    and this rank's local index (LOCAL_RANK_VARS) names a visible device. NCCL refuses two ranks
    on one GPU ("invalid usage"), so with more ranks than visible devices the ranks train on the
    CPU, and say so."""
    import torch
    if not torch.cuda.is_available():
        return False
    (ranks, source), devices = _env_int(LOCAL_SIZE_VARS, 1), torch.cuda.device_count()
    rank, rank_source = _env_int(LOCAL_RANK_VARS, 0)
    if ranks > devices or rank >= devices:
        seen = f"{ranks} ranks on this node ({source or 'no launcher variable: 1'})" if ranks > devices else \
            f"local rank {rank} ({rank_source})"
        warnings.warn(f"{seen} but {devices} visible CUDA device(s): NCCL needs one device per rank, so this rank "
                      "trains on the CPU over gloo; give each rank its own GPU (CUDA_VISIBLE_DEVICES, "
                      "--gpus-per-row) to train on CUDA", stacklevel=2)
        return False
    return True


def check_device(cfg) -> None:
    """Settings only a CUDA device runs, refused before the run when this process trains on the
    CPU (no GPU, or the gloo fallback of trains_on_cuda)."""
    t, g = cfg.train, cfg.generation
    colocate = g.backend == "vllm" and g.mode == "colocate" and real_vllm_installed()
    if t.dtype != "fp16" and not colocate:
        return   # no torch import: a plain config validates light
    if trains_on_cuda():
        return
    why = "this process trains on the CPU (no usable CUDA device for this rank; see the warning above if any)"
    if t.dtype == "fp16":
        raise ConfigError(f"train.dtype: fp16 mixed precision needs a CUDA GPU and {why}; use train.dtype=fp32 "
                          "(or bf16)")
    raise ConfigError(f"generation.mode: vLLM colocate generates on the training GPU and {why}; use "
                      "generation.backend=transformers, or generation.mode=server with a vLLM server")


def check_engines(cfg) -> list[str]:
    """Config-time checks of precision, LoRA and generation settings; returns warnings."""
    t, g, notes = cfg.train, cfg.generation, []
    if t.dtype not in DTYPES:
        raise ConfigError(f"train.dtype: unknown dtype {t.dtype!r}; valid: {', '.join(DTYPES)}")
    if t.dtype in ("bf16", "fp16") and is_planning():   # checking the hardware would load torch
        plan_note(f"train.dtype: {t.dtype} needs a CUDA GPU{' with bf16' if t.dtype == 'bf16' else ''} "
                  "(not checked while planning)")
    elif t.dtype == "bf16" and not bf16_supported():
        raise ConfigError("train.dtype: bf16 needs hardware support (a CUDA GPU with bf16, or a CPU with "
                          "AVX512-BF16/AMX) and this machine has none; use train.dtype=fp32")
    elif not is_planning():
        check_device(cfg)
    if t.cast_lm_head_to_fp32 and t.dtype == "fp32":
        notes.append("train.cast_lm_head_to_fp32 has no effect with train.dtype=fp32 (the head already is fp32)")
    if cfg.model.lora is not None:
        check_lora(cfg.model.lora)
    # a model's own config can only fail the LoRA and fp32-head checks: read (transformers and torch
    # are imported with it) only when they apply, so validating a plain config stays light
    needs_model_check = cfg.model.lora is not None or t.cast_lm_head_to_fp32
    if needs_model_check and is_planning():
        plan_note("model.lora / train.cast_lm_head_to_fp32: checked against the model's config when the run "
                  "starts (planning loads no model)")
        needs_model_check = False
    model_config = _model_config(cfg.model) if needs_model_check else None
    if model_config is not None:   # else (a GGUF preset) checked right after loading, before training
        check_model(model_config, cfg, where=cfg.model.path or f"preset {cfg.model.preset!r}")
    if g.backend not in BACKENDS:
        raise ConfigError(f"generation.backend: unknown backend {g.backend!r}; valid: {', '.join(BACKENDS)}")
    if g.mode not in VLLM_MODES:
        raise ConfigError(f"generation.mode: unknown mode {g.mode!r}; valid: {', '.join(VLLM_MODES)}")
    if g.is_correction not in SAMPLER_CORRECTIONS:   # the registry itself: an entry a test registers counts
        raise ConfigError(f"generation.is_correction: unknown {g.is_correction!r}; "
                          f"valid: {', '.join(SAMPLER_CORRECTIONS)}")
    if not 0 <= g.is_min < g.is_max:
        raise ConfigError(f"generation: need 0 <= is_min < is_max, got is_min={g.is_min}, is_max={g.is_max}")
    if not 0 < g.gpu_memory_utilization <= 1 or g.tensor_parallel_size < 1:
        raise ConfigError("generation: gpu_memory_utilization must be in (0, 1] and tensor_parallel_size >= 1")
    if g.backend == "vllm":
        if not SURROGATES[cfg.spec.surrogate].token_loss and g.is_correction != NONE:
            raise ConfigError(f"generation.is_correction: method.surrogate={cfg.spec.surrogate} has no per-token loss "
                              f"to re-weight; set generation.is_correction={NONE}")
        if not vllm_installed():
            unmet_here("generation.backend: vllm is not installed here; install the GPU extra "
                       "(pip install 'grpolab[gpu]') on a CUDA machine, or use generation.backend=transformers")
        if g.mode == "colocate" and g.tensor_parallel_size > 1:   # held-out eval generates on rank 0 only
            raise ConfigError("generation.tensor_parallel_size: > 1 with mode=colocate is not supported: grpolab's "
                              "held-out eval generates on rank 0 alone, and vLLM's tensor-parallel generate needs "
                              "every rank of its group; use tensor_parallel_size=1 or mode=server")
    elif g != GenerationCfg(backend=g.backend):
        notes.append("generation: the vllm settings (mode, memory, is_correction, ...) have no effect with "
                     "generation.backend=transformers: sampling and training log-probs come from the same model")
    return notes


def check_lora(lora: dict) -> None:
    unknown = set(lora) - set(LORA_KEYS)
    if unknown:
        raise ConfigError(f"model.lora.{sorted(unknown)[0]}: unknown key; valid: {', '.join(LORA_KEYS)}")
    for key, kind in LORA_KEYS.items():
        if key in lora and (not isinstance(lora[key], kind) or isinstance(lora[key], bool)):
            raise ConfigError(f"model.lora.{key}: expected {getattr(kind, '__name__', 'a number')}, got {lora[key]!r}")
    if lora.get("r", 8) < 1 or lora.get("alpha", 16) <= 0 or not 0 <= lora.get("dropout", 0.0) < 1:
        raise ConfigError(f"model.lora: need r >= 1, alpha > 0 and 0 <= dropout < 1, got {lora}")
    if not lora.get("target_modules"):
        raise ConfigError("model.lora.target_modules: give the module names to adapt, e.g. [q_proj, v_proj]")
    if importlib.util.find_spec("peft") is None:
        unmet_here("model.lora: LoRA needs peft (pip install peft)")


def _model_config(model):
    """The transformers config of the model a run will load, without loading weights."""
    from pathlib import Path

    if model.preset in PRESETS:
        return preset_config(model.preset, len(build_char_tokenizer()))
    folder = Path(model.path) if model.path is not None else None
    if folder is not None and not (folder / "config.json").exists() and looks_like_hub_id(model.path):
        folder = cached_hub(model.path, "model", model.revision).folder   # None: not downloaded yet
    if folder is not None and (folder / "config.json").exists():
        from transformers import AutoConfig
        return AutoConfig.from_pretrained(folder)
    return None


def check_model(model_config, cfg, where: str) -> None:
    """Settings that depend on the architecture: LoRA targets, the fp32 lm head (untied only)."""
    if cfg.train.cast_lm_head_to_fp32 and getattr(model_config, "tie_word_embeddings", False):
        raise ConfigError(f"train.cast_lm_head_to_fp32: {where} ties its lm head to the input embeddings; "
                          "TRL supports the fp32 head only for untied models")
    if cfg.model.lora is not None:
        check_lora_targets(model_config, cfg.model.lora, where)


def check_lora_targets(model_config, lora: dict, where: str) -> None:
    """Every target module name must exist in the model: built on the meta device (no weights)."""
    import torch
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(model_config)
    names = {name.rsplit(".", 1)[-1] for name, _ in skeleton.named_modules()}
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in skeleton.named_modules() if isinstance(m, torch.nn.Linear)})
    missing = [m for m in lora["target_modules"] if m not in names]
    if missing:
        raise ConfigError(f"model.lora.target_modules: {where} has no module named {missing[0]!r}; "
                          f"its linear layers are: {', '.join(linear)}")
    if model_config.tie_word_embeddings and "lm_head" in lora["target_modules"]:
        raise ConfigError("model.lora.target_modules: lm_head is tied to the input embeddings in this model")


def peft_config(lora: dict | None):
    if lora is None:
        return None
    from peft import LoraConfig
    return LoraConfig(r=lora.get("r", 8), lora_alpha=lora.get("alpha", 16), lora_dropout=lora.get("dropout", 0.0),
                      target_modules=list(lora["target_modules"]), task_type="CAUSAL_LM")


def grpo_kwargs(cfg) -> dict:
    """GRPOConfig settings for precision, memory and generation."""
    t, g = cfg.train, cfg.generation
    out = {"bf16": t.dtype == "bf16", "fp16": t.dtype == "fp16", "activation_checkpointing": t.gradient_checkpointing,
           "cast_lm_head_to_fp32": t.cast_lm_head_to_fp32}
    if t.gradient_checkpointing:   # transformers 5's names (gradient_checkpointing* are its deprecated aliases)
        out["activation_checkpointing_kwargs"] = {"use_reentrant": False}
    if g.backend == "vllm":
        out.update(use_vllm=True, vllm_mode=g.mode, vllm_gpu_memory_utilization=g.gpu_memory_utilization,
                   vllm_tensor_parallel_size=g.tensor_parallel_size, vllm_server_base_url=g.server_base_url,
                   vllm_enable_sleep_mode=g.enable_sleep_mode,
                   **sampler_trl_settings(g.is_correction, g.is_min, g.is_max))
    return out


