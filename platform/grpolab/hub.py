"""Hugging Face hub ids, resolved through the user's own hub cache.

``model.path`` and a dataset task's ``task.path`` (and ``task.held_out.path``) may name a hub
repository, ``org/name``, with ``revision`` (a branch, tag or commit; default ``main``), instead
of a local file or folder. The cache is the one the hub client uses, found as it finds it:
``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; ``HF_HUB_OFFLINE``
(or ``TRANSFORMERS_OFFLINE``) forbids downloads. Read at call time, not at import.

Detail: docs/real-models.md, "grpolab.hub".
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.planning import is_planning, plan_note

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRUE = {"1", "ON", "YES", "TRUE"}
DEFAULT_REVISION = "main"


_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".gguf", ".yaml", ".yml", ".txt", ".safetensors")


def looks_like_hub_id(text) -> bool:
    """``org/name``: one slash, no leading ``.``/``/``/``~``, not ending in a data-file suffix (a
    path that does not exist locally and has this shape is taken for a hub id)."""
    return (isinstance(text, str) and bool(_REPO_ID.match(text)) and ".." not in text
            and not text.lower().endswith(_FILE_SUFFIXES))


def hub_cache() -> Path:
    """The hub cache folder, from the environment as the hub client reads it."""
    env = os.environ
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def offline() -> bool:
    return (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "").upper() in _TRUE


@dataclass(frozen=True)
class HubRef:
    """A hub repository at a revision, and its snapshot folder in the cache (None: not cached)."""
    repo_id: str
    repo_type: str                   # model | dataset
    revision: str
    folder: Path | None = None

    @property
    def commit(self) -> str | None:
        return self.folder.name if self.folder is not None else None

    def label(self) -> str:
        return f"{self.repo_type} {self.repo_id!r} (revision {self.revision})"

    def pinned(self) -> str:
        """``org/name@commit`` (or ``@revision`` before it is cached): what a run records."""
        return f"{self.repo_id}@{self.commit or self.revision}"


def cached(repo_id: str, repo_type: str = "model", revision: str | None = None, key: str = "model.path") -> HubRef:
    """The repository's snapshot in the local cache, looked up without any network access."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, IncompleteSnapshotError, LocalEntryNotFoundError

    revision = revision or DEFAULT_REVISION
    try:
        folder = snapshot_download(repo_id, repo_type=repo_type, revision=revision, cache_dir=hub_cache(),
                                   local_files_only=True)
    except (LocalEntryNotFoundError, IncompleteSnapshotError, FileNotFoundError):
        folder = None
    except HFValidationError as exc:
        raise ConfigError(f"{key}: {repo_id!r} is not a valid hub id ({exc})") from None
    return HubRef(repo_id, repo_type, revision, Path(folder) if folder else None)


def resolve(repo_id: str, repo_type: str, revision: str | None, key: str) -> HubRef:
    """Validation: the cached snapshot, or what happens without one (docs/real-models.md, "grpolab.hub")."""
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ConfigError(f"{key.rpartition('.')[0] or key}.revision: expected a branch, tag or commit, got {revision!r}")
    ref = cached(repo_id, repo_type, revision, key)
    if ref.folder is not None:
        return ref
    missing = f"{key}: {ref.label()} is not in the local Hugging Face cache ({hub_cache()})"
    if is_planning():
        plan_note(f"{missing}: will be downloaded"
                  + (" (HF_HUB_OFFLINE is set here: download it before running)" if offline() else ""))
    elif offline():
        raise ConfigError(f"{missing} and HF_HUB_OFFLINE is set: download it first (`hf download {repo_id}"
                          f"{' --repo-type dataset' if repo_type == 'dataset' else ''} --revision {ref.revision}`, "
                          "with HF_HUB_CACHE or HF_HOME pointing at this cache), or unset HF_HUB_OFFLINE")
    else:
        warnings.warn(f"{missing}: it will be downloaded when the run starts", stacklevel=2)
    return ref


def fetch(ref: HubRef) -> HubRef:
    """Run start: the snapshot, downloaded into the cache when it is not there (online only)."""
    if ref.folder is not None and ref.folder.exists():
        return ref
    again = cached(ref.repo_id, ref.repo_type, ref.revision)
    if again.folder is not None:
        return again
    if offline():
        raise ConfigError(f"{ref.label()} is not in the local Hugging Face cache ({hub_cache()}) and HF_HUB_OFFLINE is set")
    from huggingface_hub import snapshot_download
    folder = snapshot_download(ref.repo_id, repo_type=ref.repo_type, revision=ref.revision, cache_dir=hub_cache())
    return HubRef(ref.repo_id, ref.repo_type, ref.revision, Path(folder))
