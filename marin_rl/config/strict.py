"""The base of every config section: one pydantic model class, so all sections validate the same way."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: a misspelt key is an error (extra="forbid") and a validated spec cannot change (frozen)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
