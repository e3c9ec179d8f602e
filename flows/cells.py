"""Where cell configs live: ``deployments/<cell>.yaml`` beside the code, or any YAML path."""

from __future__ import annotations

import os

DEPLOYMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deployments")


def cell_names() -> list[str]:
    """Every cell shipped under deployments/."""
    return sorted(f[: -len(".yaml")] for f in os.listdir(DEPLOYMENTS) if f.endswith(".yaml"))


def cell_config_path(cell: str) -> str:
    if cell.endswith((".yaml", ".yml")):
        return cell
    path = os.path.join(DEPLOYMENTS, f"{cell}.yaml")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no cell named {cell!r}: deployments/ has {cell_names()}; or pass a YAML path")
    return path
