"""Model files checked before a run starts: a ``.gguf`` file or a Hugging Face model folder must be
what it claims to be, whole, so that a corrupt or truncated file is answered in one line naming
it, not by a loader's traceback after the MLflow run exists.

Only headers are read (plain ``struct`` and ``json``; no torch, no transformers):

- GGUF: magic ``GGUF``, version, the metadata and tensor table walked to their end, and the file
  at least as long as ``data start + max(offset + size)`` over its tensors (sizes from the
  ``gguf`` package's block table when it is installed, else ``offset + 1``).
- safetensors: ``u64 n``, an ``n``-byte JSON header, and the file exactly ``8 + n + max(end)``
  bytes long (the format stores every tensor's ``data_offsets``).
- ``config.json``: a JSON object; the folder holds weights (``*.safetensors`` or
  ``pytorch_model*.bin``), and a sharded index names only shards that are there.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from pathlib import Path

from grpolab.errors import ConfigError

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


class _Truncated(Exception):
    pass


class _Cursor:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.at + size > len(self.data):
            raise _Truncated
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += size
        return value

    def string(self) -> bytes:
        n = self.take("Q")
        if self.at + n > len(self.data):
            raise _Truncated
        self.at += n
        return self.data[self.at - n:self.at]

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = self.take("I"), self.take("Q")
            if item in _SCALARS:   # skipped whole: a vocabulary's scores are 49k floats
                size = struct.calcsize("<" + _SCALARS[item]) * n
                if self.at + size > len(self.data):
                    raise _Truncated
                self.at += size
                return None
            return [self.value(item) for _ in range(n)]
        raise ValueError(f"unknown metadata value type {kind}")


def _tensor_bytes(kind: int, dims: list[int]) -> int:
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ImportError, ValueError, KeyError):
        return 1
    return math.prod(dims) // block * size


@functools.lru_cache(maxsize=32)
def _gguf_problem(path: str, size: int, mtime: int) -> str | None:
    with open(path, "rb") as handle:
        head = handle.read(min(size, 64 << 20))   # the metadata of the largest files stays far below this
    if head[:4] != GGUF_MAGIC:
        return "is not a GGUF file (it does not start with GGUF)"
    cursor = _Cursor(head)
    try:
        cursor.at, version = 4, None
        version = cursor.take("I")
        tensors, entries = cursor.take("Q"), cursor.take("Q")
        alignment = 32
        for _ in range(entries):
            key, kind = cursor.string(), cursor.take("I")
            value = cursor.value(kind)
            if key == b"general.alignment" and isinstance(value, int):
                alignment = value
        ends = []
        for _ in range(tensors):
            cursor.string()
            dims = [cursor.take("Q") for _ in range(cursor.take("I"))]
            kind, offset = cursor.take("I"), cursor.take("Q")
            ends.append(offset + _tensor_bytes(kind, dims))
    except _Truncated:
        return "is truncated (its header ends early)"
    except (ValueError, struct.error, OverflowError, MemoryError) as exc:
        return f"is corrupt ({exc})"
    if version not in (1, 2, 3):
        return f"has GGUF version {version}; valid: 1, 2, 3"
    start = -(-cursor.at // alignment) * alignment
    need = start + max(ends, default=0)
    if size < need:
        return f"is truncated ({size} bytes; its tensor table needs {need})"
    return None


def check_gguf(path: Path) -> None:
    stat = path.stat()
    problem = "is empty" if stat.st_size == 0 else _gguf_problem(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if problem:
        raise ConfigError(f"model.path: GGUF file {str(path)!r} {problem}; give a complete .gguf file")


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size < 8:
            return "is truncated (no header)"
        n = struct.unpack("<Q", handle.read(8))[0]
        if 8 + n > size:
            return f"is truncated (its header alone needs {8 + n} bytes, the file has {size})"
        try:
            header = json.loads(handle.read(n))
        except (ValueError, UnicodeDecodeError):
            return "is corrupt (its header is not JSON)"
    if not isinstance(header, dict):
        return "is corrupt (its header is not a JSON object)"
    ends = [t.get("data_offsets", [0, 0])[1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    if 8 + n + max(ends, default=0) != size:
        return f"is truncated or padded ({size} bytes; its header says {8 + n + max(ends, default=0)})"
    return None


def check_model_folder(folder: Path, label: str) -> None:
    """A Hugging Face model folder (``label`` names it in messages) holds a JSON config and
    complete weights; raises ConfigError naming the bad file."""
    config = folder / "config.json"
    try:
        data = json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"model.path: {str(config)!r} is not valid JSON; {label} needs a Hugging Face config.json") from None
    except OSError as exc:
        raise ConfigError(f"model.path: {str(config)!r} cannot be read ({exc.strerror})") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ConfigError(f"model.path: {str(config)!r} has no model_type; {label} needs a Hugging Face config.json")
    weights = sorted(p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"model.path: {str(index)!r} is not a safetensors index (no weight_map)") from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise ConfigError(f"model.path: shard {missing[0]!r} named by {str(index)!r} is not in {str(folder)!r}")
    if not weights:
        raise ConfigError(f"model.path: {label} {str(folder)!r} holds no weights; valid: "
                          f"{' or '.join(WEIGHT_PATTERNS)} beside config.json")
    for path in weights:
        problem = "is empty" if path.stat().st_size == 0 else (
            _safetensors_problem(path) if path.suffix == ".safetensors" else None)
        if problem:
            raise ConfigError(f"model.path: weights file {str(path)!r} {problem}; give the complete file")
