"""Downloading from the Hugging Face Hub into the shared HF cache (hub/download.h in C++).

hubzoo.pull("org/name") fetches what hubzoo runs (config, safetensors, tokenizer, chat
template, sentence-transformers modules); from_pretrained("org/name") does the same
before loading, unless offline (offline=True or HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os
from typing import Iterable

from . import _hubzoo


def pull(repo: str, revision: str | None = None, include: Iterable[str] = (), exclude: Iterable[str] = (),
         gguf_file: str | None = None, quiet: bool = False, workers: int = 8) -> str:
    """Downloads repo ("org/name", or "org/name@revision") into the HF cache; returns the
    snapshot folder. include/exclude are globs added to / removed from the default files."""
    if revision is None and "@" in repo:
        repo, revision = repo.split("@", 1)
    return _hubzoo.pull_snapshot(repo, revision or "", list(include), list(exclude), gguf_file or "",
                                 quiet, workers)


def ensure(path_or_id, gguf_file: str | None = None, offline: bool = False) -> None:
    """Downloads a repo id's missing files before a load; paths are left alone."""
    path = str(path_or_id)
    if os.path.exists(os.path.expanduser(path)):
        return
    _hubzoo.ensure_snapshot(path, gguf_file or "", offline)
