"""A served API resource, as the discovery documents describe it."""

from __future__ import annotations

from typing import Final, TypeAlias

import msgspec

__all__ = ["ALL_VERBS", "Resource"]

ALL_VERBS: Final = frozenset({"create", "delete", "get", "list", "patch", "update", "watch"})
"""The verbs of a built-in resource that allows everything the operator does with objects."""


class Resource(msgspec.Struct, frozen=True, kw_only=True):
    """One API resource (e.g. ``kopf.dev/v1 kopfexamples``), hashable and immutable.

    ``group`` is ``""`` for the core API (``/api/v1``); ``plural`` is the URL name.
    """

    group: str
    version: str
    plural: str
    kind: str = ""
    singular: str = ""
    shortcuts: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    subresources: frozenset[str] = frozenset()
    namespaced: bool = True
    preferred: bool = True
    verbs: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        """``group/version``, or only ``version`` for the core API."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def core(self) -> bool:
        return self.group == ""

    def get_url(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The path of a collection or an object, relative to the server's root URL.

        ``namespace=None`` on a namespaced resource means the cluster-wide collection.
        """
        if subresource is not None and name is None:
            raise ValueError("A subresource needs an object name.")
        parts = ["/api" if self.core else "/apis"]
        parts.append(self.api_version)
        if self.namespaced and namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            parts.append(subresource)
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.plural}.{self.version}.{self.group}".rstrip(".")


DiscoveryScope: TypeAlias = frozenset[tuple[str, str | None]]
"""The (group, version) pairs worth scanning; a version of ``None``: every version of that
group. ``None`` instead of a scope: every group (as for ``EVERYTHING`` or a selector without a
group)."""


def in_scope(scope: DiscoveryScope | None, group: str, version: str | None = None) -> bool:
    """Whether a group (any of its versions, without one) or a group version is to be scanned."""
    if scope is None:
        return True
    return any(g == group and (v is None or version is None or v == version) for g, v in scope)
