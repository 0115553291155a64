"""Finding a resource by name among the served ones: the discovery documents, read (no I/O).

The names mean what they mean in the operator's decorators (``"deployments"``,
``"apps", "v1", "deployments"``, ``kind="Deployment"``, a short name): the matcher is the
operator's own resource selector, given by the runtime layer above this one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

import msgspec

from trioperator._client.discovery import GroupVersion, resources_from_list
from trioperator._client.errors import APIProtocolError
from trioperator._client.resources import Resource
from trioperator._wire.discovery import (
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)

__all__ = ["ResourceMatcher", "choose", "group_versions", "resources_of"]

Matching = Callable[[Collection[Resource]], Collection[Resource]]


class ResourceMatcher(Protocol):
    """Makes the test of a resource specification (raising at once if it is malformed)."""

    def __call__(self, *names: str, **keywords: str | None) -> Matching: ...


def group_versions(core: bytes, groups: bytes) -> list[GroupVersion]:
    """The served group versions, from the bodies of ``/api`` and ``/apis``."""
    try:
        core_versions = decode_api_versions(core).versions
        group_list = decode_api_group_list(groups).groups
    except msgspec.DecodeError as exc:
        raise APIProtocolError(f"The discovery documents cannot be read: {exc}") from None
    found = [
        GroupVersion(path=f"/api/{version}", group="", version=version, preferred=index == 0)
        for index, version in enumerate(core_versions)
    ]
    for group in group_list:
        preferred = group.preferred_version.version if group.preferred_version else None
        found.extend(
            GroupVersion(
                path=f"/apis/{entry.group_version}",
                group=group.name,
                version=entry.version,
                preferred=entry.version == preferred,
            )
            for entry in group.versions
        )
    return found


def resources_of(body: bytes, group_version: GroupVersion) -> list[Resource]:
    """The resources of one group version (none if its document cannot be read)."""
    try:
        listing = decode_api_resource_list(body)
    except msgspec.DecodeError:
        return []
    return resources_from_list(
        listing,
        group=group_version.group,
        version=group_version.version,
        preferred=group_version.preferred,
    )


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
