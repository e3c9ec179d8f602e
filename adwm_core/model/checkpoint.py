"""A checkpoint folder: ``config.json`` + one safetensors file, on local disk or any fsspec URL."""

from __future__ import annotations

import json

import fsspec
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from ..data.io import atomic_open

CONFIG_FILE = "config.json"


def save_checkpoint(path: str, weights_file: str, module: torch.nn.Module, config: dict) -> None:
    """Each file is written atomically (``data.io.atomic_open``)."""
    root = path.rstrip("/")
    weights = {name: t.detach().to("cpu").contiguous() for name, t in module.state_dict().items()}
    with atomic_open(f"{root}/{weights_file}") as f:
        f.write(save_safetensors(weights))
    with atomic_open(f"{root}/{CONFIG_FILE}", "w") as f:
        json.dump(config, f, indent=2)


def load_checkpoint(path: str, weights_file: str, what: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, weights) of the ``what`` checkpoint at ``path``; a clear error when it is not one."""
    fs, root = fsspec.core.url_to_fs(path)
    missing = [name for name in (CONFIG_FILE, weights_file) if not fs.exists(f"{root}/{name}")]
    if missing:
        raise FileNotFoundError(
            f"{path} is not a {what} checkpoint: {', '.join(missing)} missing; point to the folder the {what} stage wrote"
        )
    with fs.open(f"{root}/{CONFIG_FILE}") as f:
        config = json.load(f)
    with fs.open(f"{root}/{weights_file}", "rb") as f:
        return config, load_safetensors(f.read())
