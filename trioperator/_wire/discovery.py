"""Discovery documents: ``/api`` (APIVersions), ``/apis`` (APIGroupList), APIResourceList.

Only the fields the framework uses are declared; everything else is ignored, so newer servers
with more fields decode fine.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "APIGroup",
    "APIGroupList",
    "APIResource",
    "APIResourceList",
    "APIVersions",
    "GroupVersionForDiscovery",
    "decode_api_group_list",
    "decode_api_resource_list",
    "decode_api_versions",
]


class APIVersions(msgspec.Struct, kw_only=True, rename="camel"):
    """``GET /api``: the versions of the core (legacy) group, normally only ``["v1"]``."""

    kind: str | None = None
    versions: list[str] = msgspec.field(default_factory=list)


class GroupVersionForDiscovery(msgspec.Struct, kw_only=True, rename="camel"):
    group_version: str
    """``group/version``, e.g. ``apps/v1``."""
    version: str


class APIGroup(msgspec.Struct, kw_only=True, rename="camel"):
    name: str
    versions: list[GroupVersionForDiscovery] = msgspec.field(default_factory=list)
    preferred_version: GroupVersionForDiscovery | None = None


class APIGroupList(msgspec.Struct, kw_only=True, rename="camel"):
    """``GET /apis``: every non-core group with its served versions."""

    kind: str | None = None
    groups: list[APIGroup] = msgspec.field(default_factory=list)


class APIResource(msgspec.Struct, kw_only=True, rename="camel"):
    """One entry of an APIResourceList.

    Subresources are listed as separate entries named ``<plural>/<subresource>``
    (``kopfexamples/status``, ``pods/log``).
    """

    name: str
    singular_name: str = ""
    namespaced: bool = False
    kind: str = ""
    verbs: list[str] = msgspec.field(default_factory=list)
    short_names: list[str] = msgspec.field(default_factory=list)
    categories: list[str] = msgspec.field(default_factory=list)
    group: str | None = None
    version: str | None = None


class APIResourceList(msgspec.Struct, kw_only=True, rename="camel"):
    """``GET /api/v1`` or ``GET /apis/<group>/<version>``."""

    kind: str | None = None
    group_version: str = ""
    resources: list[APIResource] = msgspec.field(default_factory=list)


_VERSIONS_DECODER: msgspec.json.Decoder[APIVersions] = msgspec.json.Decoder(APIVersions)
_GROUPS_DECODER: msgspec.json.Decoder[APIGroupList] = msgspec.json.Decoder(APIGroupList)
_RESOURCES_DECODER: msgspec.json.Decoder[APIResourceList] = msgspec.json.Decoder(APIResourceList)


def decode_api_versions(data: bytes) -> APIVersions:
    return _VERSIONS_DECODER.decode(data)


def decode_api_group_list(data: bytes) -> APIGroupList:
    return _GROUPS_DECODER.decode(data)


def decode_api_resource_list(data: bytes) -> APIResourceList:
    return _RESOURCES_DECODER.decode(data)
