"""A Hugging Face hub cache written offline the way the hub client stores downloads, for tests:

    <cache>/models--org--name/blobs/<sha256>                      file contents
    <cache>/models--org--name/snapshots/<40-hex commit>/<file>    symlink -> ../../blobs/<sha256>
    <cache>/models--org--name/refs/<revision>                     the commit
    (datasets--org--name/... for datasets)

``huggingface_hub.snapshot_download(..., local_files_only=True)`` finds such a repository as if it
had been downloaded; nothing here touches the network."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def put_repo(cache: Path, repo_id: str, files: dict[str, bytes], repo_type: str = "model",
             revision: str = "main") -> Path:
    """Store ``files`` (relative path -> bytes) as one commit of ``repo_id``; returns its snapshot folder."""
    root = Path(cache) / f"{repo_type}s--{repo_id.replace('/', '--')}"
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    commit = digest.hexdigest()
    snapshot = root / "snapshots" / commit
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            os.symlink(os.path.relpath(blob, link.parent), link)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / revision).write_text(commit)
    return snapshot


def go_offline(monkeypatch, cache: Path) -> Path:
    """Point the hub client at ``cache`` and forbid downloads, for one test."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (e.g. a ``save_pretrained`` directory) as ``put_repo`` takes them."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def parquet_bytes(rows: list[dict]) -> bytes:
    import io

    import pandas as pd
    buffer = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buffer, index=False)
    return buffer.getvalue()
