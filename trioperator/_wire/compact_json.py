"""Compact JSON text, exactly as ``json.dumps(value, separators=(",", ":"))`` writes it.

The records kept in annotations (progress, the diff-base) and the journal are JSON strings that
Kopf writes with ``json.dumps`` and reads back; an operator moving between the two frameworks
must find the same text. Each handled object writes a few of them, and ``json.dumps`` (which
builds a new encoder for every call with these separators) is most of their cost.

msgspec writes the same text several times faster, except in these cases, which are told from
its output (a few plain byte searches, no regular expression: those cost more than ``json``
itself here) and then written by ``json`` itself:
- characters beyond ASCII, and DEL: ``json`` escapes them (``\\u00e9``, ``\\u007f``), msgspec
  writes them as they are;
- floats in exponent form or below 1e-4: ``json`` writes ``1e+16`` and ``1e-05`` where msgspec
  writes ``1e16`` and ``0.00001``; every other finite float is written alike (checked over a
  million random floats of every magnitude). So a digit followed by an exponent, or
  ``0.0000``, anywhere (strings included: a false alarm only costs the slower way) sends the
  value to ``json``.
NaN and infinities, which ``json`` writes and msgspec does not, never occur in what the API
server sends (it is JSON) nor in the records made from it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["dumps_compact"]

_ENCODE = msgspec.json.Encoder().encode
_JSON = json.JSONEncoder(separators=(",", ":"))  # what json.dumps builds per call, made once
# Every digit becomes 0 and E becomes e: an exponent is then the two bytes 0e.
_DIGITS = bytes.maketrans(b"123456789E", b"000000000e")


def dumps_compact(value: Any) -> str:
    """The text of ``json.dumps(value, separators=(",", ":"))`` for JSON-like values."""
    try:
        encoded = _ENCODE(value)
    except (TypeError, ValueError, OverflowError):
        return _JSON.encode(value)  # not msgspec's kind of value: json says what it thinks
    if (
        not encoded.isascii()
        or b"\x7f" in encoded
        or b"0.0000" in encoded
        or b"0e" in encoded.translate(_DIGITS)
    ):
        return _JSON.encode(value)
    return encoded.decode("ascii")
