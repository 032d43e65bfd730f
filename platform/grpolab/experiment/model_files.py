"""Model files checked before a run starts: a ``.gguf`` file or a Hugging Face model folder must be
what it claims to be, whole, so that a corrupt or truncated file is answered in one line naming
it, not by a loader's traceback after the MLflow run exists.

Detail: docs/runs.md, "grpolab.experiment.model_files".
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import struct
from pathlib import Path

from grpolab.errors import ConfigError

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# bits per element of every safetensors dtype (sub-byte float formats included)
SAFETENSORS_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
                    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
                    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64}
TORCH_MAGICS = (b"PK\x03\x04", b"\x80")


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
    ends = [0]
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        problem = _tensor_entry_problem(tensor)
        if problem:
            return f"is corrupt (tensor {name!r}: {problem})"
        ends.append(tensor["data_offsets"][1])
    if 8 + n + max(ends) != size:
        return f"is truncated or padded ({size} bytes; its header says {8 + n + max(ends)})"
    return None


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor_entry_problem(tensor) -> str | None:
    """What is wrong with one safetensors header entry ``{dtype, shape, data_offsets}``, if anything."""
    if not isinstance(tensor, dict):
        return "expected a mapping of dtype, shape and data_offsets"
    dtype, shape, offsets = tensor.get("dtype"), tensor.get("shape"), tensor.get("data_offsets")
    if dtype not in SAFETENSORS_BITS:
        return f"dtype {dtype!r} is unknown; valid: {', '.join(SAFETENSORS_BITS)}"
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        return f"shape {shape!r} is not a list of non-negative integers"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        return f"data_offsets {offsets!r} is not [start, end] integers with 0 <= start <= end"
    need = -(-math.prod(shape) * SAFETENSORS_BITS[dtype] // 8)
    if offsets[1] - offsets[0] != need:
        return (f"shape {shape} of {dtype} needs {need} bytes, its data_offsets span {offsets[1] - offsets[0]}")
    return None


def _torch_bin_problem(path: Path) -> str | None:
    with open(path, "rb") as handle:
        head = handle.read(4)
    if not head.startswith(TORCH_MAGICS):
        return "is not a PyTorch checkpoint (neither a zip archive starting PK\\x03\\x04 nor a pickle)"
    return None


def _json_object(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"model.path: {str(path)!r} is not valid JSON; {what}") from None
    except OSError as exc:
        raise ConfigError(f"model.path: {str(path)!r} cannot be read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"model.path: {str(path)!r} is not a JSON object; {what}")
    return data


def _check_tokenizer(folder: Path, label: str) -> None:
    present = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not present:
        raise ConfigError(f"model.path: {label} {str(folder)!r} holds no tokenizer; valid: "
                          f"{', '.join(TOKENIZER_FILES)} beside config.json")
    for path in present:
        if path.suffix == ".json":
            _json_object(path, f"{label} needs a complete Hugging Face {path.name}")


def check_model_folder(folder: Path, label: str) -> None:
    """A Hugging Face model folder (``label`` names it in messages) holds a JSON config and
    complete weights; raises ConfigError naming the bad file."""
    config = folder / "config.json"
    data = _json_object(config, f"{label} needs a Hugging Face config.json")
    if "model_type" not in data:
        raise ConfigError(f"model.path: {str(config)!r} has no model_type; {label} needs a Hugging Face config.json")
    weights = sorted(p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern) if p.is_file())
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
            _safetensors_problem(path) if path.suffix == ".safetensors" else _torch_bin_problem(path))
        if problem:
            raise ConfigError(f"model.path: weights file {str(path)!r} {problem}; give the complete file")
    _check_tokenizer(folder, label)


def content_digest(path: Path) -> str:
    """sha256 of a model file, or of a model folder as the manifest ``sha256sum`` prints for its
    regular files in byte order of their relative paths, so a shell checks it without grpolab:

        cd FOLDER && find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum

    A folder the manifest cannot state plainly is refused (ValueError): a symbolic link, a name
    that is not UTF-8 or that ``sha256sum`` escapes (backslash, newline), no file at all."""
    path = Path(path)
    if path.is_file():
        return _file_sha256(path)
    names = []
    for p in path.rglob("*"):
        name = p.relative_to(path).as_posix()
        if p.is_symlink():
            raise ValueError(f"{path}: {name} is a symbolic link; a shipped model holds regular files only")
        if not p.is_file():
            continue
        try:
            name.encode()
        except UnicodeEncodeError:
            raise ValueError(f"{path}: a file name is not UTF-8 ({name.encode(errors='replace').decode()!r})") from None
        if "\\" in name or "\n" in name:
            raise ValueError(f"{path}: file name {name!r} holds a backslash or newline, which sha256sum escapes")
        names.append(name)
    if not names:
        raise ValueError(f"{path}: holds no file")
    manifest = "".join(f"{_file_sha256(path / name)}  {name}\n" for name in sorted(names, key=str.encode))
    return hashlib.sha256(manifest.encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_model_digest(path: str, expected: str) -> None:
    """model.sha256: the local model.path must have this ``content_digest`` (a base model shipped as
    a file is the same model on every machine, whatever its CPU kernels would have trained)."""
    if not (isinstance(expected, str) and len(expected) == 64 and all(c in "0123456789abcdef" for c in expected)):
        raise ConfigError(f"model.sha256: need 64 lowercase hex digits (sha256), got {expected!r}")
    try:
        actual = _digest_once(Path(path).resolve(), _signature(Path(path)))
    except OSError as exc:
        raise ConfigError(f"model.path: {exc.filename or path!r} cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"model.sha256: {exc}") from None
    if actual != expected:
        raise ConfigError(f"model.sha256: {path} has digest {actual}, not the declared {expected}: the files changed "
                          "or are another model; restore them (git checkout -- PATH) or declare the new digest")


def _signature(path: Path) -> tuple:
    """Names, sizes and modification times: a study validates every rung's config, and a
    multi-GB model is hashed again only when one of these changed."""
    files = [path] if path.is_file() else sorted(path.rglob("*"))
    return tuple((str(p), stat.st_size, stat.st_mtime_ns) for p in files for stat in [p.lstat()])


@functools.lru_cache(maxsize=16)
def _digest_once(path: Path, signature: tuple) -> str:
    return content_digest(path)

