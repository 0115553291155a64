"""A real API server's objects, by resource name, for tests in the test's trio run.

:class:`ClusterObjects` is what ``operator.cluster`` is when the harness runs an operator
against a real control plane (``run_operator(server=...)``): the counterpart of the fake API's
``get_object``/``create_object``/``patch_object``/``delete_object``, as async methods over
trioperator's own API client (its HTTP stack, TLS and retries).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from trioperator._client.api import APIClient
from trioperator._client.discovery import scan_resources
from trioperator._client.errors import APINotFoundError
from trioperator._client.resources import Resource

__all__ = ["ClusterObjects", "UnknownResourceError"]

Obj = dict[str, Any]


class UnknownResourceError(LookupError):
    """The API server serves no resource of that name (yet: a CRD may be being established).

    A ``LookupError``, so the harness's waits take it as "not yet" and try again.
    """


@final
class ClusterObjects:
    """Objects of a real API server: ``resource`` is a plural (``"kopfexamples"``), or
    ``plural.group`` when ambiguous (``"kopfexamples.kopf.dev"``; the core group's resources
    are just ``"pods"``, ``"configmaps"``...). The preferred version of the group is used."""

    def __init__(self, api: APIClient) -> None:
        self.api = api
        """The API client, for requests beyond these few."""
        self._resources: list[Resource] | None = None

    async def resource(self, name: str) -> Resource:
        """The resource of that name; discovery is asked again once when it is not known."""
        for rescan in (False, True):
            if self._resources is None or rescan:
                self._resources = await scan_resources(self.api)
            matching = [
                resource
                for resource in self._resources
                if name in (resource.plural, f"{resource.plural}.{resource.group}")
            ]
            if matching:
                matching.sort(key=lambda resource: not resource.preferred)
                return matching[0]
        raise UnknownResourceError(f"The API server serves no resource {name!r}.")

    async def get(self, resource: str, name: str, namespace: str | None = None) -> Obj:
        """The object as the server holds it; ``KeyError`` if there is none."""
        res = await self.resource(resource)
        try:
            return await self.api.get(res, namespace=namespace, name=name)
        except APINotFoundError:
            where = f"{namespace}/{name}" if namespace else name
            raise KeyError(f"No {resource} {where} on the API server.") from None

    async def exists(self, resource: str, name: str, namespace: str | None = None) -> bool:
        try:
            await self.get(resource, name, namespace)
        except KeyError:
            return False
        return True

    async def create(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Obj:
        """Create an object; the namespace defaults to the body's ``metadata.namespace``."""
        return await self.api.create(await self.resource(resource), namespace=namespace, body=body)

    async def patch(
        self,
        resource: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """A merge-patch of the object (or of its ``status`` subresource); the patched object."""
        return await self.api.patch(
            await self.resource(resource),
            namespace=namespace,
            name=name,
            payload=patch,
            subresource=subresource,
        )

    async def delete(self, resource: str, name: str, namespace: str | None = None) -> None:
        """Request the object's deletion (its finalizers may keep it for a while)."""
        await self.api.delete(await self.resource(resource), namespace=namespace, name=name)
