"""The base of every config section: one pydantic model class, so all sections validate the same way."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: a misspelt key is an error (extra="forbid"), a validated spec cannot change (frozen), and
    inf/nan in any float (optimizer.lr=inf, ...) is an error naming the key (allow_inf_nan=False)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
