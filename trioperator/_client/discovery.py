"""Discovery: which resources the API server serves, from ``/api`` and ``/apis``.

Every served version of every group is scanned (not only the preferred one): an operator may
be written for a version that is not preferred. A group version that fails to answer with a
"not there" or server error (e.g. an aggregated API whose backend is down, answering 503) is
logged and skipped, so one broken extension does not blind the whole operator. Connection
failures and other errors escalate: they are not about one group.

Groups are scanned one after another: this layer opens no nurseries, and a scan is rare.
"""

from __future__ import annotations

import logging

import msgspec

from trioperator._client.api import APIClient, Logger
from trioperator._client.errors import APIForbiddenError, APINotFoundError, APIServerError
from trioperator._client.resources import Resource
from trioperator._wire.discovery import (
    APIResourceList,
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)

__all__ = ["resources_from_list", "scan_resources"]

_LOGGER = logging.getLogger(__name__)

_SKIPPABLE = (APINotFoundError, APIForbiddenError, APIServerError)


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


async def _scan_group_version(
    api: APIClient,
    path: str,
    *,
    group: str,
    version: str,
    preferred: bool,
    log: Logger,
) -> list[Resource]:
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
    return resources_from_list(listing, group=group, version=version, preferred=preferred)


async def scan_resources(api: APIClient, *, logger: Logger | None = None) -> list[Resource]:
    """Every resource of every served group version (core first, then groups in server order)."""
    log: Logger = logger if logger is not None else _LOGGER
    resources: list[Resource] = []

    core = decode_api_versions((await api.request_raw("GET", "/api", logger=log)).body)
    for index, version in enumerate(core.versions):
        # The core group has no "preferred version" field; the server lists it first.
        resources += await _scan_group_version(
            api, f"/api/{version}", group="", version=version, preferred=index == 0, log=log
        )

    groups = decode_api_group_list((await api.request_raw("GET", "/apis", logger=log)).body)
    for group in groups.groups:
        preferred = group.preferred_version.version if group.preferred_version else None
        for group_version in group.versions:
            resources += await _scan_group_version(
                api,
                f"/apis/{group_version.group_version}",
                group=group.name,
                version=group_version.version,
                preferred=group_version.version == preferred,
                log=log,
            )
    return resources
