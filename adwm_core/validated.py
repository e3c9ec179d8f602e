"""The one base of every config model: frozen pydantic, unknown fields refused, changes
validated. Its own module, so the names (specs.py) and the stage settings (settings.py) share it
without importing each other — nor entering each other's code fingerprints."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from typing_extensions import Self


class Settings(BaseModel):
    """Frozen, and a field it does not know is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``, validated (and filled from the preset) like a new one."""
        return type(self).model_validate({**self.model_dump(), **changes})
