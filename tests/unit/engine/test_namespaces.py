"""Namespace patterns: Kopf's matching table, literal selection, and ``-n`` option parsing."""

from __future__ import annotations

import re

import pytest
from trioperator._engine.namespaces import (
    NamespacePattern,
    is_literal,
    literal_namespaces,
    match_namespace,
    match_pattern,
    parse_namespace_options,
)

Case = tuple[str, NamespacePattern, bool]

# (name, pattern, expected): the cases of Kopf's own suite, grouped as there.
EXACT: list[Case] = [
    ("ns1", "ns1", True),
    ("ns1", "ns", False),
    ("ns1", "", False),
]
GLOBS: list[Case] = [
    ("ns1", "*", True),
    ("ns1", "ns*", True),
    ("ns1", "ns?", True),
    ("ns1", "ns??", False),
    ("ns1", "n*1", True),
    ("ns1", "n?1", True),
    ("ns1", "n??1", False),
    ("ns1", "*1", True),
    ("ns1", "?1", False),
    ("ns1", "??1", True),
    ("ns1", "ns*x", False),
]
MULTIPLE: list[Case] = [
    ("ns1", "ns1,ns2", True),
    ("ns1", "ns2,ns1", False),  # a later inclusion only re-includes, never adds
]
SPACES: list[Case] = [
    ("ns1", " ns1", True),
    ("ns1", "ns1 ", True),
    ("ns1", " ns1 ", True),
    ("ns1", " ns1 , ns2 ", True),
    ("ns1", " ns2 , ns1 ", False),
]
EXCLUSIONS_AFTER_INCLUSION: list[Case] = [
    ("ns1", "ns*,!ns1", False),
    ("ns1", "ns*,!ns2", True),
]
INITIAL_EXCLUSION: list[Case] = [  # as if preceded by "*"
    ("ns1", "!ns1", False),
    ("ns1", "!ns2", True),
    ("ns1", "!ns*", False),
]
REINCLUSION: list[Case] = [
    ("ns1", "ns*,!ns1,ns1", True),
    ("ns1", "ns*,!ns*,ns1", True),
    ("ns1", "!ns*,ns1", True),
    ("ns1", "!ns*,ns?", True),
]
REGEXPS: list[Case] = [
    ("ns1", re.compile(r"ns1"), True),
    ("ns1", re.compile(r"ns"), False),
    ("ns1", re.compile(r"s1"), False),
    ("ns1", re.compile(r".+s1"), True),
    ("ns1", re.compile(r"ns.+"), True),
]
# The example of the documentation ("Scopes"), and its variant with an implied leading "*".
DOCUMENTED: list[Case] = [
    ("myapp-live", "myapp-*,!*-pr-*,*-pr-123", True),
    ("myapp-pr-456", "myapp-*,!*-pr-*,*-pr-123", False),
    ("myapp-pr-123", "myapp-*,!*-pr-*,*-pr-123", True),
    ("otherapp-live", "myapp-*,!*-pr-*,*-pr-123", False),
    ("otherapp-pr-123", "myapp-*,!*-pr-*,*-pr-123", False),  # the first glob is decisive
    ("otherapp-pr-123", "!*-pr-*,*-pr-123", True),  # the implied "*" accepted it first
    ("myapp-pr-456", "!*-pr-*,*-pr-123", False),
    ("anyapp-anything", "!*-pr-*,*-pr-123", True),
    ("myapp-pr-123", "myapp-*, !*-pr-*, *-pr-123", True),
]
# Exclusions and re-inclusions alternate; the rightmost applicable glob wins.
ALTERNATING: list[Case] = [
    ("ns1", "ns*,!ns1,ns1,!ns1", False),
    ("ns1", "ns*,!ns1,ns1,!ns2", True),
    ("ns1", "!ns1,ns1,!ns?", False),
    ("ns1", "!!ns1", False),  # repeated "!" is one exclusion
]


@pytest.mark.parametrize(
    ("name", "pattern", "expected"),
    EXACT
    + GLOBS
    + MULTIPLE
    + SPACES
    + EXCLUSIONS_AFTER_INCLUSION
    + INITIAL_EXCLUSION
    + REINCLUSION
    + REGEXPS
    + DOCUMENTED
    + ALTERNATING,
)
def test_match_pattern(name: str, pattern: NamespacePattern, expected: bool) -> None:
    assert match_pattern(name, pattern) is expected


def test_globs_are_case_sensitive() -> None:
    assert not match_pattern("ns1", "NS*")


def test_brackets_are_globs() -> None:
    assert match_pattern("ns1", "ns[0-9]")
    assert not match_pattern("nsx", "ns[0-9]")


@pytest.mark.parametrize(
    ("name", "patterns", "expected"),
    [
        ("ns1", [], False),
        ("ns1", ["ns1"], True),
        ("ns1", ["ns2", "ns1"], True),  # separate patterns, unlike "ns2,ns1"
        ("ns1", ["ns2", "ns3"], False),
        ("ns1", ["ns2", re.compile("n.1")], True),
        ("ns1", ["!ns*", "ns2"], False),
        ("ns1", ["!ns1", "ns*"], True),  # one exclusion does not veto the other patterns
    ],
)
def test_match_namespace_is_any_of_patterns(
    name: str, patterns: list[NamespacePattern], expected: bool
) -> None:
    assert match_namespace(name, patterns) is expected


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("ns1", True),
        (" ns1 ", True),
        ("kube-system", True),
        ("", False),  # no namespace has an empty name (Kopf would keep it)
        ("  ", False),
        ("ns1,ns2", False),
        ("n*s", False),
        ("n?s", False),
        ("!ns1", False),
        ("ns[12]", False),
        (re.compile("ns1"), False),
    ],
)
def test_is_literal(pattern: NamespacePattern, expected: bool) -> None:
    assert is_literal(pattern) is expected


def test_literal_namespaces_selection() -> None:
    assert literal_namespaces([]) == frozenset()
    assert literal_namespaces(["ns2", "ns1"]) == {"ns1", "ns2"}
    assert literal_namespaces(["ns1,ns2"]) == frozenset()
    assert literal_namespaces(["n*s", "n?s", "!ns"]) == frozenset()
    assert literal_namespaces([re.compile("ns1")]) == frozenset()
    assert literal_namespaces([" ns1 ", "ns1", "e2e-*"]) == {"ns1"}


def test_option_values_are_whole_patterns() -> None:
    assert parse_namespace_options([]) == ()
    assert parse_namespace_options(["ns1", "ns2"]) == ("ns1", "ns2")
    # Commas belong to the pattern: they are not several options.
    assert parse_namespace_options(["myapp-*,!*-pr-*"]) == ("myapp-*,!*-pr-*",)
    assert parse_namespace_options([" ns1 ", "", "  ", "ns1", "!ns2"]) == ("ns1", "!ns2")
