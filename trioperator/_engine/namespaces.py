"""Namespace patterns: which namespaces an operator serves (``-n``/``--namespace``).

A pattern is either a compiled regular expression (it must match the whole name) or a string
of comma-separated globs (``*`` and ``?`` as in shell globs; spaces around globs are ignored).
A glob prefixed with ``!`` excludes. The globs are applied from left to right:

* the first glob decides whether the name is a candidate at all; if the first glob is an
  exclusion, a catch-all ``*`` is implied in front of it;
* an exclusion removes the name if it matches;
* a later inclusion only brings back a name that the first glob accepted and a previous
  exclusion removed; it never adds a name on its own. So ``"ns2,ns1"`` does not match ``ns1``.

For example, ``"myapp-*,!*-pr-*,*-pr-123"`` matches ``myapp-live`` and ``myapp-pr-123`` but
neither ``myapp-pr-456`` nor ``otherapp-pr-123`` (the first glob rejects it, and nothing can
bring it back). A name is served if any of the patterns (one per ``-n`` option) matches it.

Matching a glob pattern needs the list of namespaces (and a watch on them). Without the
permission to list them, only the literal names among the patterns can be served: see
:func:`is_literal` and :func:`literal_namespaces`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Final, TypeAlias

__all__ = [
    "NamespacePattern",
    "is_literal",
    "literal_namespaces",
    "match_namespace",
    "match_pattern",
    "parse_namespace_options",
]

NamespacePattern: TypeAlias = str | re.Pattern[str]
"""One ``-n`` value (comma-separated globs with ``!`` exclusions), or a compiled regexp."""

_SPECIAL: Final = frozenset(",*?![]")
"""Characters that make a string a pattern rather than one namespace name.

``[`` and ``]`` are globs for :mod:`fnmatch` too; a namespace name (a DNS label) can contain
none of these characters, so a string with any of them is never a literal name.
"""


def _globs(pattern: str) -> list[str]:
    globs = [glob.strip() for glob in pattern.split(",")]
    if globs[0].startswith("!"):
        globs.insert(0, "*")
    return globs


def match_pattern(name: str, pattern: NamespacePattern) -> bool:
    """Whether one namespace name matches one pattern (see the module's description)."""
    if isinstance(pattern, re.Pattern):
        return pattern.fullmatch(name) is not None

    # Case-sensitive on every platform: namespace names are lower-case DNS labels anyway.
    first, *rest = _globs(pattern)
    candidate = fnmatch.fnmatchcase(name, first)
    matches = candidate
    for glob in rest:
        if glob.startswith("!"):
            if matches and fnmatch.fnmatchcase(name, glob.lstrip("!")):
                matches = False
        elif candidate and not matches and fnmatch.fnmatchcase(name, glob):
            matches = True
    return matches


def match_namespace(name: str, patterns: Iterable[NamespacePattern]) -> bool:
    """Whether a namespace is served: any of the patterns matches it."""
    return any(match_pattern(name, pattern) for pattern in patterns)


def is_literal(pattern: NamespacePattern) -> bool:
    """Whether the pattern is one plain namespace name (neither a glob list nor a regexp).

    Only such names can be served when namespaces cannot be listed (HTTP 403).
    """
    if not isinstance(pattern, str):
        return False
    name = pattern.strip()
    return bool(name) and not (_SPECIAL & set(name))


def literal_namespaces(patterns: Iterable[NamespacePattern]) -> frozenset[str]:
    """The plain namespace names among the patterns (stripped); globs and regexps are left out."""
    return frozenset(
        pattern.strip() for pattern in patterns if isinstance(pattern, str) and is_literal(pattern)
    )


def parse_namespace_options(values: Iterable[str]) -> tuple[str, ...]:
    """The patterns of repeated ``-n``/``--namespace`` options, in the order given.

    Each value is one pattern: its commas separate the globs of that pattern, they do not make
    several patterns (``-n a,b`` serves only ``a``; ``-n a -n b`` serves both). Surrounding
    spaces and empty values are dropped; duplicates are kept only once.
    """
    patterns: list[str] = []
    for value in values:
        pattern = value.strip()
        if pattern and pattern not in patterns:
            patterns.append(pattern)
    return tuple(patterns)
