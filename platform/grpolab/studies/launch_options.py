"""How a study's rows are launched, as a study file's ``launcher:`` section or the command line
gives it: the Slurm options of its worker jobs (slurm.py) and an accelerate / DeepSpeed
configuration for rows on several processes (ranks.py).

Detail: docs/clusters-and-gpus.md, "grpolab.studies.launch_options".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grpolab.errors import ConfigError, did_you_mean

# launcher.slurm key -> the command-line flag that overrides it
SLURM_KEYS = {"account": "--account", "partition": "--partition", "qos": "--qos", "mem": "--mem",
              "constraint": "--constraint", "exclude": "--exclude", "setup": "--setup", "time": "--time",
              "jobs": "--jobs", "cpus_per_job": "--cpus-per-job", "params": "--slurm-param"}
LAUNCHER_KEYS = ("accelerate_config", "slurm")


@dataclass(frozen=True)
class LaunchOptions:
    accelerate_config: str | None = None                # resolved path, checked
    slurm: dict = field(default_factory=dict)           # launcher.slurm, checked names and types


def parse_launcher(raw, study_path: Path) -> LaunchOptions:
    """A study file's ``launcher:`` section; a relative accelerate_config is relative to the study file."""
    if raw is None:
        return LaunchOptions()
    if not isinstance(raw, dict):
        raise ConfigError(f"launcher: expected a mapping of {', '.join(LAUNCHER_KEYS)}, got {raw!r}")
    for key in raw:
        if key not in LAUNCHER_KEYS:
            raise ConfigError(f"launcher.{key}: unknown key{did_you_mean(key, LAUNCHER_KEYS)}; "
                              f"valid: {', '.join(LAUNCHER_KEYS)}")
    accelerate = raw.get("accelerate_config")
    if accelerate is not None:
        if not isinstance(accelerate, str) or not accelerate.strip():
            raise ConfigError(f"launcher.accelerate_config: expected a file path, got {accelerate!r}")
        path = Path(accelerate)
        accelerate = str(path if path.is_absolute() else (Path(study_path).parent / path))
        read_accelerate_config(accelerate, "launcher.accelerate_config")
    return LaunchOptions(accelerate, parse_slurm(raw.get("slurm")))


def parse_slurm(raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"launcher.slurm: expected a mapping of {', '.join(SLURM_KEYS)}, got {raw!r}")
    for key, value in raw.items():
        where = f"launcher.slurm.{key}"
        if key not in SLURM_KEYS:
            raise ConfigError(f"{where}: unknown key{did_you_mean(key, SLURM_KEYS)}; valid: {', '.join(SLURM_KEYS)}")
        if key == "setup" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{where}: expected a list of shell lines, got {value!r}")
        elif key == "params" and not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
            raise ConfigError(f"{where}: expected a mapping of submitit Slurm parameters, got {value!r}")
        elif key in ("jobs", "cpus_per_job") and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{where}: expected an integer >= 1, got {value!r}")
        elif key in ("time", "mem") and not isinstance(value, str):
            # YAML reads unquoted 30:00 as base-60 (1800) and a bare 64 means 64 MB to Slurm
            example = '"4:00:00"' if key == "time" else '"64G"'
            raise ConfigError(f"{where}: expected a quoted string such as {example}, got {value!r}; quote it in the file"
                              + (" (YAML reads unquoted H:MM:SS as a base-60 number)" if key == "time" else
                                 " (a bare number is megabytes to Slurm)"))
        elif key not in ("setup", "params", "jobs", "cpus_per_job") and not isinstance(value, (str, int)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
    return {k: (str(v) if k not in ("setup", "params", "jobs", "cpus_per_job") else v) for k, v in raw.items()}


def parse_slurm_param(text: str) -> tuple[str, object]:
    """``--slurm-param key=value``: ``true``/``false`` become booleans and plain decimal integers
    integers; everything else stays the string written (``wckey=007``, ``comment=10:30``)."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--slurm-param: expected key=value, got {text!r}")
    if value in ("true", "false"):
        return key.strip(), value == "true"
    return key.strip(), int(value) if re.fullmatch(r"-?(0|[1-9][0-9]*)", value) else value


def parse_slurm_params(texts) -> dict:
    """Every ``--slurm-param``: ``additional_parameters.KEY=V`` (one sbatch option each) or
    ``additional_parameters={"KEY": "V", ...}`` (a JSON mapping) gather into one mapping."""
    params: dict = {}
    for text in texts:
        key, value = parse_slurm_param(text)
        if key.startswith("additional_parameters."):
            params.setdefault("additional_parameters", {})[key.split(".", 1)[1]] = value
        elif key == "additional_parameters":
            try:
                extra = json.loads(value) if isinstance(value, str) else None
            except ValueError:
                extra = None
            if not isinstance(extra, dict):
                raise ConfigError(f"--slurm-param additional_parameters: expected a JSON mapping such as "
                                  f'{{"gpu-bind": "closest"}} (or additional_parameters.KEY=VALUE), got {value!r}')
            params["additional_parameters"] = {**params.get("additional_parameters", {}), **extra}
        else:
            params[key] = value
    return params


def read_accelerate_config(path: str, where: str) -> dict:
    """An accelerate config file (YAML or JSON, as ``accelerate config`` writes it), as a mapping."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{where}: {path} does not exist")
    if not file.is_file():
        raise ConfigError(f"{where}: {path} is not a file (an accelerate config YAML or JSON is expected)")
    try:
        data = yaml.safe_load(file.read_text())   # JSON is YAML too
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: {path} is not YAML or JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {path} is not an accelerate config (expected a mapping such as "
                          "distributed_type: DEEPSPEED, num_processes: 2)")
    ds_file = _deepspeed(data).get("deepspeed_config_file")
    if ds_file and not (file.parent / ds_file).exists() and not Path(ds_file).exists():
        raise ConfigError(f"{where}: {path} names deepspeed_config_file {ds_file}, which does not exist")
    _check_what_grpolab_decides(data, f"{where}: {path}")
    return data


def deepspeed_config_file(path: str) -> str | None:
    """The DeepSpeed JSON an accelerate file names, as an absolute path: relative to the accelerate
    file when it is there, else to the current folder (accelerate itself reads it relative to the
    folder it is launched in, which for a worker is not the study's)."""
    data = yaml.safe_load(Path(path).read_text())   # checked already (check_accelerate_config)
    named = _deepspeed(data if isinstance(data, dict) else {}).get("deepspeed_config_file")
    if not named:
        return None
    beside = Path(path).parent / named
    return str((beside if beside.exists() else Path(named)).resolve())


def _deepspeed(data: dict) -> dict:
    return data["deepspeed_config"] if isinstance(data.get("deepspeed_config"), dict) else {}


def _check_what_grpolab_decides(data: dict, where: str) -> None:
    """Keys a row's launch sets itself (ranks.accelerate_command passes them as flags, which beat
    the file): in the file they would be silently overridden, so they are refused."""
    if data.get("mixed_precision") is not None:
        raise ConfigError(f"{where} sets mixed_precision: {data['mixed_precision']}; each row's train.dtype decides "
                          "it (fp32 -> no, bf16, fp16: passed as --mixed_precision), so remove it from the file")
    if data.get("gpu_ids") is not None and str(data["gpu_ids"]).strip() != "all":
        raise ConfigError(f"{where} sets gpu_ids: {data['gpu_ids']}; a row runs on its worker's devices "
                          "(CUDA_VISIBLE_DEVICES from --devices), so use gpu_ids: all or remove it")
    kind = data.get("distributed_type")
    if kind is not None and kind not in ("MULTI_GPU", "DEEPSPEED"):
        raise ConfigError(f"{where} says distributed_type: {kind}; a row on K processes runs with MULTI_GPU "
                          "(gloo on CPU, NCCL on GPUs) or DEEPSPEED")
    if data.get("use_cpu") or (data.get("num_machines") or 1) != 1:
        raise ConfigError(f"{where} says use_cpu: {data.get('use_cpu')}, num_machines: {data.get('num_machines')}; "
                          "a row runs on its worker's node and devices: use_cpu: false, num_machines: 1")


def row_generation_backends(study) -> set[str]:
    """The generation backends a study's rows may use (every rung of a ladder; a search's base and
    the choices of a searched generation.backend)."""
    experiments = study.study_kind.row_experiments(study)
    backends = {(e.get("generation") or {}).get("backend", "transformers") for e in experiments}
    searched = (study.space or {}).get("generation.backend")
    return backends | set(searched.get("choices") or []) if isinstance(searched, dict) else backends


def check_rows_fit(path: str, study, where: str) -> None:
    """What the file's ZeRO stage asks of the study's rows: under ZeRO-3 every rank holds a shard
    of the weights, so ``model.generate`` must run on all ranks; grpolab's mid-run evaluation
    generates on rank 0 alone, which waits for ever for the others' shards unless vLLM
    (its own full copy of the weights) generates."""
    if _deepspeed(read_accelerate_config(path, where)).get("zero_stage") != 3:
        return
    plain = sorted(row_generation_backends(study) - {"vllm"})
    if plain:
        raise ConfigError(f"{where}: {path} is DeepSpeed ZeRO-3, which needs generation.backend: vllm in every row "
                          f"(rows here use {', '.join(plain)}: the evaluation on rank 0 alone would wait for ever "
                          "for the other ranks' weight shards); use a ZeRO-2 file or generation.backend: vllm")


def check_accelerate_config(path: str, per_row: int | None, where: str) -> str:
    """The file, checked against the row's K processes (``--gpus-per-row K``): a file's own
    num_processes must be K, since accelerate launches K processes with it."""
    data = read_accelerate_config(path, where)
    wanted = data.get("num_processes")
    if per_row is None or per_row < 2:
        raise ConfigError(f"{where}: only with --gpus-per-row K >= 2 (the processes each row runs as; a row on one "
                          "process trains inside its worker)"
                          + (f"; {path} says num_processes: {wanted}" if wanted is not None else ""))
    if wanted is not None and wanted != per_row:
        raise ConfigError(f"{where}: {path} says num_processes: {wanted}, but --gpus-per-row is {per_row}; "
                          "make them agree")
    return str(Path(path).resolve())


def row_accelerate_config(flag: str | None, study: LaunchOptions, per_row: int | None) -> str | None:
    """The accelerate config the rows use: ``--accelerate-config`` over the study file's
    ``launcher.accelerate_config``, checked against K; None when neither gives one."""
    chosen, where = (flag, "--accelerate-config") if flag is not None else (study.accelerate_config,
                                                                            "launcher.accelerate_config")
    return None if chosen is None else check_accelerate_config(chosen, per_row, where)
