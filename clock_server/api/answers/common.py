"""Field types the answers share."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from clock_server.model import CHANNELS, STATUSES

EpochMs = Annotated[int, Field(description="epoch ms")]
Count = Annotated[int, Field(ge=0)]
# The vocabulary's tuples, as enums: a Literal cannot be built from a tuple for the type checker.
Status = Annotated[str, Field(json_schema_extra={"enum": list(STATUSES)})]
Channel = Annotated[str, Field(json_schema_extra={"enum": list(CHANNELS)})]
