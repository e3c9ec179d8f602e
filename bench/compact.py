"""A world model kept without what its seed gives back: the untouched rows of its token table.

A world model's file is 28 MB, 17 MB of it f_θ's hash-token table (32,768 × 128). Training reads
only the rows its texts reach (training/world_model.py, ``ReachableTokenRows``), so every other row
keeps the value a fresh build from the training seed draws. :func:`compact` writes each member's
weights without those rows, with the seed and the SHA-256 of the original file; :func:`expand`
builds the model from the seed again, puts the kept rows back and refuses a result that is not the
original file byte for byte (a torch whose initialisation draws otherwise, a model not built from
its seed alone). Nothing is approximated: an artifact that does not come back exactly is kept whole.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

TABLE = "observation_encoder.tokens.weight"
WEIGHTS, COMPACT, HISTORY = "model.safetensors", "model.compact.safetensors", "history.json"  # training/world_model.py
ROWS, VALUES = "compact.table_rows", "compact.table_values"


def _seeded_table(member: Path, seed: int):
    """The token table a fresh build of the member's architecture draws from ``seed`` (as training does)."""
    import torch

    from adwm_core.model.world_model import WorldModel, WorldModelConfig

    config = WorldModelConfig.from_json(json.loads((member / "config.json").read_text()))
    torch.manual_seed(seed)
    return WorldModel(config).observation_encoder.tokens.weight.detach()


def _training_seed(model: Path, member: int) -> int:
    """The seed member ``member`` of the world model at ``model`` was built from (train_world_model)."""
    return json.loads((model / HISTORY).read_text())["config"]["seed"] + member


def _model(folder: Path) -> Path:
    """The world model of a world-model artifact (its ``members`` output: member 0's folder), or
    ``folder`` where it is one itself."""
    inner = folder / "members"
    return inner if (inner / "config.json").exists() else folder


def _members(model: Path) -> list[Path]:
    from adwm_core.model.world_model import member_paths

    return [Path(path) for path in member_paths(str(model))]


def compact(folder: Path) -> bool:
    """Each member's ``model.safetensors`` under ``folder`` (a copy of a world-model artifact, or a
    world model's folder) replaced by ``model.compact.safetensors``, where every member comes back
    exactly and leaves out most of its token table's rows; else nothing is changed. Whether it was
    compacted."""
    import torch
    from safetensors.torch import load, save

    model, written = _model(folder), []
    for index, member in enumerate(_members(model)):
        original = (member / WEIGHTS).read_bytes()
        weights = load(original)
        seed = _training_seed(model, index)
        table = weights.pop(TABLE)
        differing = torch.nonzero((table.view(torch.int32) != _seeded_table(member, seed).view(torch.int32)).any(1))
        rows = differing.flatten().to(torch.int64)
        if 2 * len(rows) > len(table):  # most rows are not the seed's: not built from it alone, nothing to gain
            return False
        weights.update({ROWS: rows, VALUES: table[rows].contiguous()})
        packed = save(weights, metadata={"seed": str(seed), "sha256": hashlib.sha256(original).hexdigest()})
        if _expanded(member, packed) != original:
            return False
        written.append((member, packed))
    for member, packed in written:
        (member / COMPACT).write_bytes(packed)
        (member / WEIGHTS).unlink()
    return True


def _expanded(member: Path, packed: bytes) -> bytes:
    """The original weights file of a member from its compact form."""
    from safetensors.torch import load, save

    weights = load(packed)
    table = _seeded_table(member, int(_metadata(packed)["seed"])).clone()
    rows, values = weights.pop(ROWS), weights.pop(VALUES)
    table[rows] = values
    weights[TABLE] = table
    return save(weights)


def expand(folder: Path) -> None:
    """Every compact member under ``folder`` (a restored world-model artifact) written back as its
    original ``model.safetensors``, checked against the SHA-256 it was kept with."""
    model = _model(folder)
    for member in _members(model):
        if not (member / COMPACT).exists():
            continue
        packed = (member / COMPACT).read_bytes()
        original = _expanded(member, packed)
        expected = _metadata(packed)["sha256"]
        if hashlib.sha256(original).hexdigest() != expected:
            raise RuntimeError(f"{member}: the world model rebuilt from its seed is not the one kept (a torch that "
                               "initialises otherwise?); remove the folder and run `python -m bench.store build "
                               f"<its cell>` to train it again")
        (member / WEIGHTS).write_bytes(original)
        (member / COMPACT).unlink()


def _metadata(packed: bytes) -> dict[str, str]:
    header = int.from_bytes(packed[:8], "little")
    return json.loads(packed[8:8 + header])["__metadata__"]
