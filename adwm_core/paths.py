"""Where artifacts live: ``$ADWM_HOME`` (default ``./.adwm``), a local path or any fsspec URL."""

from __future__ import annotations

import os


def artifact_root() -> str:
    """The artifact root, without a trailing slash."""
    return os.environ.get("ADWM_HOME", os.path.abspath(".adwm")).rstrip("/")


def artifact_path(*parts: str) -> str:
    """Join ``parts`` under the artifact root with '/' (valid for local paths and URLs)."""
    return "/".join([artifact_root(), *(p.strip("/") for p in parts)])


def local_cache_dir(*parts: str) -> str:
    """A local folder for files engines must read from disk (compiled games, model copies):
    under ``$ADWM_HOME`` when that is a local path, else under ``~/.cache/adwm``."""
    root = artifact_root()
    base = root if "://" not in root else os.path.join(os.path.expanduser("~"), ".cache", "adwm")
    path = os.path.join(base, *parts)
    os.makedirs(path, exist_ok=True)
    return path
