"""Discovery: which resources the API server serves, from ``/api`` and ``/apis``.

Every served version of every group is scanned (not only the preferred one): an operator may
be written for a version that is not preferred. A group version that fails to answer with a
"not there" or server error (e.g. an aggregated API whose backend is down, answering 503) is
logged and skipped, so one broken extension does not blind the whole operator. Connection
failures and other errors escalate: they are not about one group.

A scan can be limited to a :data:`DiscoveryScope`: the API groups (and versions) that the
handlers' selectors can match; the other groups' resource lists are not requested at all. Here
the group versions are scanned one after another (this layer opens no nurseries); the runtime
layer scans them in parallel with the same building blocks (``_runtime/support/discovering.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from trioperator._client.api import APIClient, Logger
from trioperator._client.errors import (
    APIForbiddenError,
    APINotFoundError,
    APIProtocolError,
    APIServerError,
)
from trioperator._client.http import HTTPResponse
from trioperator._client.resources import DiscoveryScope, Resource, in_scope
from trioperator._wire.discovery import (
    APIGroup,
    APIResourceList,
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)

__all__ = [
    "DiscoveryScope",
    "GroupVersion",
    "core_group_versions",
    "group_version_resources",
    "in_scope",
    "list_core_versions",
    "list_group_versions",
    "named_group_versions",
    "resources_from_list",
    "scan_group_version",
    "scan_resources",
]

_LOGGER = logging.getLogger(__name__)
_T = TypeVar("_T")

_SKIPPABLE = (APINotFoundError, APIForbiddenError, APIServerError)


@dataclasses.dataclass(frozen=True)
class GroupVersion:
    """One served group version, as the discovery roots (``/api``, ``/apis``) list it."""

    path: str
    group: str
    version: str
    preferred: bool


def resources_from_list(
    listing: APIResourceList, *, group: str, version: str, preferred: bool
) -> list[Resource]:
    """The resources of one group version, with their subresources attached to them."""
    subresources: dict[str, set[str]] = {}
    for entry in listing.resources:
        if "/" in entry.name:
            parent, _, sub = entry.name.partition("/")
            subresources.setdefault(parent, set()).add(sub)

    resources: list[Resource] = []
    for entry in listing.resources:
        if "/" in entry.name:
            continue
        resources.append(
            Resource(
                group=group,
                version=version,
                plural=entry.name,
                kind=entry.kind,
                # Built-in resources of older servers leave singularName empty; kubectl then
                # uses the lower-cased kind, and so do we.
                singular=entry.singular_name or entry.kind.lower(),
                shortcuts=frozenset(entry.short_names),
                categories=frozenset(entry.categories),
                subresources=frozenset(subresources.get(entry.name, ())),
                namespaced=entry.namespaced,
                preferred=preferred,
                verbs=frozenset(entry.verbs),
            )
        )
    return resources


def core_group_versions(
    versions: Sequence[str], scope: DiscoveryScope | None = None
) -> list[GroupVersion]:
    """The core group's versions (``/api``'s list) in the scope."""
    return [
        # The core group has no "preferred version" field; the server lists it first.
        GroupVersion(path=f"/api/{version}", group="", version=version, preferred=index == 0)
        for index, version in enumerate(versions)
        if in_scope(scope, "", version)
    ]


def named_group_versions(
    groups: Sequence[APIGroup], scope: DiscoveryScope | None = None
) -> list[GroupVersion]:
    """The named groups' versions (``/apis``' list) in the scope, in the server's order."""
    found: list[GroupVersion] = []
    for group in groups:
        if not in_scope(scope, group.name):
            continue
        preferred = group.preferred_version.version if group.preferred_version else None
        found.extend(
            GroupVersion(
                path=f"/apis/{group_version.group_version}",
                group=group.name,
                version=group_version.version,
                preferred=group_version.version == preferred,
            )
            for group_version in group.versions
            # The preferred flag needs the whole group; out-of-scope versions are just skipped.
            if in_scope(scope, group.name, group_version.version)
        )
    return found


def group_version_resources(
    listing: APIResourceList, group_version: GroupVersion
) -> list[Resource]:
    """The resources of the resource list of ``group_version``."""
    return resources_from_list(
        listing,
        group=group_version.group,
        version=group_version.version,
        preferred=group_version.preferred,
    )


async def scan_group_version(
    api: APIClient, group_version: GroupVersion, *, logger: Logger | None = None
) -> list[Resource]:
    """The resources of one group version; none (with a warning) if it cannot be read."""
    log: Logger = logger if logger is not None else _LOGGER
    path = group_version.path
    try:
        response = await api.request_raw("GET", path, logger=log)
    except _SKIPPABLE as exc:
        log.warning(f"Skipping {path} in the resource discovery: {exc}")
        return []
    try:
        listing = decode_api_resource_list(response.body)
    except msgspec.DecodeError as exc:
        log.warning(f"Skipping {path} in the resource discovery: malformed response: {exc}")
        return []
    return group_version_resources(listing, group_version)


def _decoded(decode: Callable[[bytes], _T], response: HTTPResponse, path: str) -> _T:
    """The discovery document of ``path``; a malformed one is the server's (or a proxy's) error
    of the exchange, said as such, not a decoder's traceback."""
    try:
        return decode(response.body)
    except msgspec.DecodeError as exc:
        raise APIProtocolError(
            f"GET {path}: the discovery document (HTTP {response.status}, {len(response.body)}"
            f" bytes) cannot be read: {exc}"
        ) from exc


async def list_core_versions(
    api: APIClient, *, scope: DiscoveryScope | None = None, logger: Logger | None = None
) -> list[GroupVersion]:
    """The core group's versions in the scope (no request if the core group is out of it)."""
    if not in_scope(scope, ""):
        return []
    log: Logger = logger if logger is not None else _LOGGER
    core = _decoded(decode_api_versions, await api.request_raw("GET", "/api", logger=log), "/api")
    return core_group_versions(core.versions, scope)


async def list_group_versions(
    api: APIClient, *, scope: DiscoveryScope | None = None, logger: Logger | None = None
) -> list[GroupVersion]:
    """The named groups' versions in the scope, in the server's order (no request if only
    the core group is in the scope)."""
    if scope is not None and all(group == "" for group, _ in scope):
        return []
    log: Logger = logger if logger is not None else _LOGGER
    response = await api.request_raw("GET", "/apis", logger=log)
    groups = _decoded(decode_api_group_list, response, "/apis")
    return named_group_versions(groups.groups, scope)


async def scan_resources(
    api: APIClient, *, scope: DiscoveryScope | None = None, logger: Logger | None = None
) -> list[Resource]:
    """Every resource of every served group version in the scope (all without a scope): core
    first, then groups in server order; one request after another."""
    resources: list[Resource] = []
    for list_versions in (list_core_versions, list_group_versions):
        for group_version in await list_versions(api, scope=scope, logger=logger):
            resources += await scan_group_version(api, group_version, logger=logger)
    return resources
