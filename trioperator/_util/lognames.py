"""The framework's loggers: named as Kopf names them, and reachable by trioperator's names too.

Kopf operators tune Kopf's loggers, e.g. ``logging.getLogger("kopf.objects").setLevel(WARNING)``
to silence the per-object success lines, or a handler on ``kopf.activities.probe``. For such
settings to act here exactly as they do under Kopf, the records are made by loggers with Kopf's
names (``kopf.objects``, ``kopf.activities.<activity>``, ``kopf._core.engines.peering``, ...):
so a record's name, the originating logger's level, filters, handlers and ``propagate``, and
the Kopf loggers above it (``kopf._core.engines``, ``kopf._core``, ``kopf``) are all the ones
Kopf would have used.

trioperator's own names keep working: they are real loggers placed on the same chain, between
the Kopf loggers. ``Logger.parent`` decides which loggers a record passes (handlers,
``propagate``) and where the effective level comes from, and it is set here once, at import::

    kopf.objects -> trioperator.objects -> trioperator -> kopf -> root
    kopf.activities.probe -> trioperator.activities.probe -> kopf.activities
        -> trioperator.activities -> trioperator -> kopf -> root
    kopf._core.engines.peering -> trioperator.peering -> kopf._core.engines -> kopf._core
        -> trioperator -> kopf -> root
    trioperator.sharding (no counterpart in Kopf) -> trioperator -> kopf -> root

Every Kopf name of a chain comes in Kopf's order, and the trioperator loggers between them do
nothing unless someone configures them (no level, no handlers, ``propagate`` on): for a Kopf
operator, the chain is Kopf's. Everything the framework logs passes ``trioperator`` and then
``kopf``, as everything Kopf logs passes ``kopf``. What the trioperator names cannot do:
filters on them, as filters act on the logger that makes the record only (a Kopf name).

Nothing is added per record: no extra handler or filter, and the effective levels are cached
by ``logging`` as usual; a record only passes a few more (empty) loggers on its way up.

Every logger on these chains is created at once (no placeholders in between), so that
``logging`` never re-links them when someone creates a logger later: a new logger in between
two existing ones is only ever a child of a name that exists here already.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["KOPF_ROOT", "TRIOPERATOR_ROOT", "framework_logger"]

KOPF_ROOT = "kopf"
TRIOPERATOR_ROOT = "trioperator"

# Kopf's top-level groups and the trioperator logger each of them hangs from.
_GROUP_PARENTS = {
    "kopf.objects": "trioperator.objects",
    "kopf.activities": "trioperator.activities",
}

_lock = threading.Lock()
_aliases: dict[str, list[str]] = {}  # Kopf name -> the trioperator names in front of its parent
_owners: dict[str, str] = {}  # trioperator name -> the one Kopf name it stands in front of


def framework_logger(kopf_name: str, *names: str) -> logging.Logger:
    """The logger named ``kopf_name`` that the framework logs with; ``names`` reach it too.

    ``names`` are trioperator's names for the same records (e.g. ``trioperator.peering``):
    their levels, handlers and ``propagate`` apply after those of ``kopf_name`` and before
    those of its Kopf parents. Calling it again with the same arguments changes nothing.
    """
    with _lock:
        _link_roots()
        logger = logging.getLogger(kopf_name)
        _link_kopf_ancestors(kopf_name)
        known = _aliases.setdefault(kopf_name, [])
        for name in names:
            if name in known:
                continue
            owner = _owners.setdefault(name, kopf_name)
            if owner != kopf_name:
                # A logger has one parent: it cannot stand in two chains.
                raise ValueError(f"{name!r} is already a name of {owner!r}, not of {kopf_name!r}")
            _create_with_ancestors(name)
            alias = logging.getLogger(name)
            # The chain so far: logger -> known aliases -> the Kopf parent. The new one goes
            # last, in front of the Kopf parent.
            last = logging.getLogger(known[-1]) if known else logger
            alias.parent = last.parent
            last.parent = alias
            known.append(name)
            alias.setLevel(alias.level)  # clear the cached levels (see _link_roots)
    return logger


def _link_roots() -> None:
    kopf = logging.getLogger(KOPF_ROOT)
    trioperator = logging.getLogger(TRIOPERATOR_ROOT)
    if trioperator.parent is not kopf:
        trioperator.parent = kopf
        # The effective levels are cached per logger; a changed chain must not use old ones.
        # (setLevel() with the same level is the public way to clear those caches.)
        trioperator.setLevel(trioperator.level)


def _link_kopf_ancestors(kopf_name: str) -> None:
    """Create the Kopf loggers above ``kopf_name``; hang Kopf's top-level group from ours."""
    parts = kopf_name.split(".")
    if parts[0] != KOPF_ROOT or len(parts) < 2:
        raise ValueError(f"Not a name under {KOPF_ROOT!r}: {kopf_name!r}")
    for depth in range(2, len(parts)):
        logging.getLogger(".".join(parts[:depth]))
    group_name = ".".join(parts[:2])
    group = logging.getLogger(group_name)
    parent_name = _GROUP_PARENTS.get(group_name, TRIOPERATOR_ROOT)
    if group.parent is logging.getLogger(KOPF_ROOT) or group.parent is logging.getLogger():
        _create_with_ancestors(parent_name)
        group.parent = logging.getLogger(parent_name)
        group.setLevel(group.level)  # clear the cached levels (see _link_roots)


def _create_with_ancestors(name: str) -> None:
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        logging.getLogger(".".join(parts[:depth]))
