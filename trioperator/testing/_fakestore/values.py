"""JSON values as the store keeps them, and a fast deep copy of them."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

JSON = Any
Obj = dict[str, Any]
ResourceKey = tuple[str, str]  # (group, plural)
ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]

ENCODE = msgspec.json.Encoder()
DECODE = msgspec.json.Decoder()


def clone(value: JSON) -> JSON:
    """A deep copy of a JSON-like value (a msgspec round trip is faster than ``deepcopy``)."""
    return DECODE.decode(ENCODE.encode(value))
