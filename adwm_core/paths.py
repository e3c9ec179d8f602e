"""Where artifacts live: ``$ADWM_HOME`` (default ``./.adwm``), a local path or any fsspec URL."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable


def artifact_root() -> str:
    """The artifact root, without a trailing slash."""
    return os.environ.get("ADWM_HOME", os.path.abspath(".adwm")).rstrip("/")


def artifact_path(*parts: str) -> str:
    """Join ``parts`` under the artifact root with '/' (valid for local paths and URLs)."""
    return "/".join([artifact_root(), *(p.strip("/") for p in parts)])


def local_cache_dir(*parts: str) -> str:
    """A local folder for files engines must read from disk (compiled games, model copies):
    under ``$ADWM_HOME`` when that is a local path, else under ``$ADWM_CACHE`` (default
    ``~/.cache/adwm``)."""
    root = artifact_root()
    base = root if "://" not in root else os.environ.get("ADWM_CACHE", os.path.expanduser("~/.cache/adwm"))
    path = os.path.join(base, *parts)
    os.makedirs(path, exist_ok=True)
    return path


def write_whole(folder: str, fill: Callable[[str], object]) -> str | None:
    """``folder``, created by ``fill`` on a sibling temporary folder renamed into place, so it
    appears whole or not at all (when two processes race, the first copy stays); an existing
    folder is returned as it is. None, and nothing created, where ``fill`` returns None."""
    if os.path.isdir(folder):
        return folder
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    aside = tempfile.mkdtemp(dir=parent, prefix=".tmp-")
    try:
        if fill(aside) is None:
            return None
        try:
            os.rename(aside, folder)
        except OSError:  # another process wrote it first
            if not os.path.isdir(folder):
                raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return folder
