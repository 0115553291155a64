"""Finding a resource by name among the served ones: the discovery documents, read (no I/O).

The names mean what they mean in the operator's decorators (``"deployments"``,
``"apps", "v1", "deployments"``, ``kind="Deployment"``, a short name): the matcher is the
operator's own resource selector, given by the runtime layer above this one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

import msgspec

from trioperator._client.discovery import (
    GroupVersion,
    core_group_versions,
    group_version_resources,
    named_group_versions,
)
from trioperator._client.errors import APIProtocolError
from trioperator._client.resources import Resource
from trioperator._wire.discovery import (
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)

__all__ = [
    "Matching",
    "ResourceMatcher",
    "ResourceView",
    "choose",
    "group_versions",
    "resources_of",
    "wanted",
]

Matching = Callable[[Collection[Resource]], Collection[Resource]]


class ResourceMatcher(Protocol):
    """Makes the test of a resource specification (raising at once if it is malformed)."""

    def __call__(self, *names: str, **keywords: str | None) -> Matching: ...


def wanted(
    matcher: ResourceMatcher | None,
    names: Sequence[str | Resource],
    keywords: Mapping[str, str | None],
) -> Resource | tuple[Matching, str]:
    """What ``api.resource(*names, **keywords)`` asks for: a :class:`Resource` as given, or the
    test that finds it among the served ones, with its description for errors."""
    if len(names) == 1 and isinstance(names[0], Resource) and not keywords:
        return names[0]
    if matcher is None or any(isinstance(name, Resource) for name in names):
        raise TypeError("Give a Resource, or names with a client that can look them up.")
    text_names = tuple(str(name) for name in names)
    matching = matcher(*text_names, **keywords)  # malformed: raises now
    described = ", ".join(
        [repr(name) for name in text_names]
        + [f"{key}={value!r}" for key, value in keywords.items() if value is not None]
    )
    return matching, f"resource({described})"


class ResourceView:
    """The base of both clients' per-resource operations: the resource, or what finds it."""

    def __init__(self, resource: Resource | tuple[Matching, str]) -> None:
        self._resource = resource if isinstance(resource, Resource) else None
        self._wanted = resource if not isinstance(resource, Resource) else None

    def __repr__(self) -> str:
        shown = self._resource if self._resource is not None else self._wanted and self._wanted[1]
        return f"<{type(self).__name__} {shown}>"


def group_versions(core: bytes, groups: bytes) -> list[GroupVersion]:
    """The served group versions, from the bodies of ``/api`` and ``/apis``."""
    try:
        core_versions = decode_api_versions(core).versions
        group_list = decode_api_group_list(groups).groups
    except msgspec.DecodeError as exc:
        raise APIProtocolError(f"The discovery documents cannot be read: {exc}") from None
    return core_group_versions(core_versions) + named_group_versions(group_list)


def resources_of(body: bytes, group_version: GroupVersion) -> list[Resource]:
    """The resources of one group version (none if its document cannot be read)."""
    try:
        listing = decode_api_resource_list(body)
    except msgspec.DecodeError:
        return []
    return group_version_resources(listing, group_version)


def choose(matching: Matching, resources: Sequence[Resource], described: str) -> Resource | None:
    """The one resource matched; ``None`` if none; ``LookupError`` if several different ones."""
    matched = matching(resources)
    if not matched:
        return None
    kinds = {(resource.group, resource.plural) for resource in matched}
    if len(kinds) > 1:
        names = ", ".join(sorted(str(resource) for resource in matched))
        raise LookupError(f"{described} is ambiguous: it matches {names}. Name the group.")
    # Several versions of one resource (a version was not given and none is preferred):
    # the first one served.
    return next(iter(sorted(matched, key=lambda resource: not resource.preferred)))
