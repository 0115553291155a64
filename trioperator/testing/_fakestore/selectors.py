"""Label and field selectors of lists and watches, parsed with the API server's errors."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from trioperator.testing._fakestore.catalogue import ResourceDef
from trioperator.testing._fakestore.errors import bad_request
from trioperator.testing._fakestore.values import Obj

_LABEL_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_EXISTS = re.compile(rf"\s*(!?)\s*({_LABEL_KEY})\s*")
_RE_EQUALS = re.compile(rf"\s*({_LABEL_KEY})\s*(==|=|!=)\s*({_LABEL_VALUE})\s*")
_RE_SET = re.compile(rf"\s*({_LABEL_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_RE_ORDER = re.compile(rf"\s*({_LABEL_KEY})\s*([<>])\s*(-?[0-9]+)\s*")
_RE_VALUE = re.compile(_LABEL_VALUE)


def _split_requirements(text: str) -> list[str]:
    """Split a selector on the commas that are not inside ``in (...)`` sets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if text is None or not text.strip():
            return cls()
        requirements: list[tuple[str, str, tuple[str, ...]]] = []
        for part in _split_requirements(text):
            if m := _RE_EXISTS.fullmatch(part):
                requirements.append((m[2], "!" if m[1] else "exists", ()))
            elif m := _RE_EQUALS.fullmatch(part):
                requirements.append((m[1], "!=" if m[2] == "!=" else "=", (m[3],)))
            elif m := _RE_SET.fullmatch(part):
                values = tuple(v.strip() for v in m[3].split(","))
                if values == ("",):
                    raise bad_request(
                        f"unable to parse requirement: for '{m[2]}', '{m[2]}' operators,"
                        " values set can't be empty"
                    )
                if not all(_RE_VALUE.fullmatch(v) for v in values):
                    raise bad_request(f"unable to parse requirement: invalid values in {part!r}")
                requirements.append((m[1], m[2], values))
            elif m := _RE_ORDER.fullmatch(part):
                requirements.append((m[1], m[2], (m[3],)))
            else:
                raise bad_request(f"unable to parse requirement: {part.strip()!r}")
        return cls(tuple(requirements))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        for key, op, values in self.requirements:
            present = key in labels
            value = labels.get(key)
            if op == "exists":
                ok = present
            elif op == "!":
                ok = not present
            elif op == "=":
                ok = present and value == values[0]
            elif op == "!=":
                ok = value != values[0]
            elif op == "in":
                ok = present and value in values
            elif op == "notin":
                ok = value not in values
            else:  # "<" / ">" compare integers; non-integer labels never match
                try:
                    number = int(value or "")
                except ValueError:
                    return False
                ok = number < int(values[0]) if op == "<" else number > int(values[0])
            if not ok:
                return False
        return True


@dataclasses.dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str | None, res: ResourceDef) -> FieldSelector:
        if text is None or not text.strip():
            return cls()
        requirements: list[tuple[str, bool, str]] = []
        for part in text.split(","):
            m = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
            if m is None:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
            field, op, value = m[1], m[2], m[3]
            if field not in res.selectable_fields:
                if res.custom or res.field_labels:
                    raise bad_request(f"field label not supported: {field}")
                known = ", ".join(f'"{f}"' for f in res.selectable_fields)
                raise bad_request(f'"{field}" is not a known field selector: only {known}')
            requirements.append((field, op != "!=", value))
        return cls(tuple(requirements))

    def matches(self, obj: Obj) -> bool:
        for field, equal, expected in self.requirements:
            value: Any = obj
            for step in field.split("."):
                value = value.get(step) if isinstance(value, dict) else None
            actual = (
                ""
                if value is None
                else str(value).lower()
                if isinstance(value, bool)
                else str(value)
            )
            if (actual == expected) != equal:
                return False
        return True
