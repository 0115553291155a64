"""Which objects of a resource the API server sends at all: the server-side selectors.

Two sources, combined with AND (the API server's selectors are conjunctions):

* configured: ``settings.watching.selectors``, per resource (or ``"*"``);
* derived: the part of the handlers' ``labels=`` filters that *every* handler watching the
  resource shares and that a label selector expresses exactly: ``key=value`` for a literal
  value, ``key`` for ``PRESENT`` (or the deprecated ``None``), ``!key`` for ``ABSENT``. An
  object outside of that part matches no handler, so not receiving it changes nothing that a
  handler sees. Callables, ``annotations=``, ``field=``/``value=`` and ``when=`` stay
  client-side (as all filters do: the push-down only saves traffic, the handlers' filters are
  still checked for every event).

Not derived when some handler of the resource has no exact label requirement in common with the
others, nor when ``on.event`` handlers, daemons or timers serve the resource: the API server
reports an object that leaves a selection as ``DELETED``, which an ``on.event`` handler would
then receive (without the selector it would not have been called: the object no longer matched
it), and which would stop a daemon with ``RESOURCE_DELETED`` instead of Kopf's
``FILTERS_MISMATCH``. A configured selector applies regardless: the user chose to narrow the
operator's view.

Pure: computed once per watcher start from the registry and the settings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from trioperator._client.resources import Resource
from trioperator._client.settings import WatchingSettings, WatchSelector
from trioperator._engine.filters import ABSENT, PRESENT, MetaFilter
from trioperator._engine.handlers import (
    ChangingHandler,
    IndexingHandler,
    ReconcilingHandler,
    RelayingHandler,
    ResourceHandler,
    SpawningHandler,
    WatchingHandler,
)
from trioperator._engine.registry import OperatorRegistry

__all__ = [
    "Requirement",
    "derive_label_selector",
    "configured_selector",
    "label_requirements",
    "watch_selector",
]

Requirement = tuple[str, str, str]
"""One exact label requirement: (key, operator, value) with the operator ``=``, ``exists`` or
``!exists`` (the value is ``""`` for the latter two)."""

# The categories of handlers that receive a watched resource's events. Webhooks and activities
# do not watch.
_WATCHING_KINDS: Final[tuple[type[ResourceHandler], ...]] = (
    WatchingHandler,
    ChangingHandler,
    SpawningHandler,
    IndexingHandler,
    ReconcilingHandler,
    RelayingHandler,
)

# Kubernetes' label syntax: a value is at most 63 characters of alphanumerics, '-', '_', '.',
# beginning and ending with an alphanumeric; a key is such a name, optionally prefixed by a DNS
# subdomain and '/'. A requirement outside of the syntax could never match a stored label, and
# it would break the selector's syntax: it stays client-side.
_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _valid_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _PREFIX.match(prefix)):
        return False
    return bool(_NAME.match(name))


def label_requirements(labels: MetaFilter | None) -> frozenset[Requirement]:
    """The requirements of one handler's ``labels=`` that a label selector expresses exactly."""
    requirements: set[Requirement] = set()
    for key, value in (labels or {}).items():
        if not isinstance(key, str) or not _valid_key(key):
            continue
        if value is None or value is PRESENT:
            requirements.add((key, "exists", ""))
        elif value is ABSENT:
            requirements.add((key, "!exists", ""))
        elif isinstance(value, str) and _NAME.match(value):
            # (An empty value is a valid label, but it is left client-side: not every API
            # server version parses ``key=`` the same way.)
            requirements.add((key, "=", value))
    return frozenset(requirements)


def _format(requirements: Iterable[Requirement]) -> str | None:
    parts: list[str] = []
    for key, op, value in sorted(requirements):
        if op == "=":
            parts.append(f"{key}={value}")
        elif op == "exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts) or None


def derive_label_selector(registry: OperatorRegistry, resource: Resource) -> str | None:
    """The label selector that every handler watching ``resource`` implies, if any."""
    handlers: list[ResourceHandler] = []
    for kind in _WATCHING_KINDS:
        handlers.extend(registry.get_handlers(kind, resource))
    if not handlers:
        return None
    if any(isinstance(handler, WatchingHandler | SpawningHandler) for handler in handlers):
        return None  # see the module's docstring: departures would look like deletions
    common: frozenset[Requirement] | None = None
    for handler in handlers:
        own = label_requirements(handler.labels)
        common = own if common is None else common & own
        if not common:
            return None
    return _format(common or ())


def _keys_of(resource: Resource) -> tuple[str, ...]:
    keys = [f"{resource.plural}.{resource.group}" if resource.group else resource.plural]
    keys.append(resource.plural)
    if resource.kind:
        keys.append(resource.kind)
    keys.append("*")
    return tuple(keys)


def configured_selector(
    selectors: Mapping[str, WatchSelector | str], resource: Resource
) -> WatchSelector | None:
    """The configured selector of ``resource``: the most specific key that names it."""
    for key in _keys_of(resource):
        value = selectors.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            return WatchSelector(labels=value)
        if isinstance(value, WatchSelector):
            return value
        raise TypeError(
            f"settings.watching.selectors[{key!r}] must be a label selector (str) or a"
            f" WatchSelector, not {type(value).__name__}."
        )
    return None


def watch_selector(
    settings: WatchingSettings, registry: OperatorRegistry, resource: Resource
) -> WatchSelector | None:
    """What to send on the listings and watches of ``resource``: ``None`` for everything."""
    configured = configured_selector(settings.selectors, resource)
    derived = derive_label_selector(registry, resource) if settings.derive_selectors else None
    labels = [part for part in (configured.labels if configured else None, derived) if part]
    fields = configured.fields if configured else None
    if not labels and not fields:
        return None
    return WatchSelector(labels=",".join(labels) or None, fields=fields)
