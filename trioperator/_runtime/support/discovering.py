"""Discovery in parallel: the served resources of the group versions in a scope.

The client layer (``_client/discovery.py``) reads one discovery document at a time; an operator
waits for the discovery before its first listing, so here both roots (``/api``, ``/apis``) are
read at once, and then every group version in the scope at once. The result is in the same
order as a sequential scan (core first, then the groups in the server's order), so that what
is served does not depend on which response came first.

A failure of one request (other than the per-group-version ones that the client layer skips
with a warning) cancels the others and is raised as it is, not wrapped in an exception group:
callers handle API errors the same way as after a sequential scan.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

from trioperator._client.api import APIClient, Logger
from trioperator._client.discovery import (
    GroupVersion,
    list_core_versions,
    list_group_versions,
    scan_group_version,
)
from trioperator._client.resources import DiscoveryScope, Resource

__all__ = ["discover_resources"]

_T = TypeVar("_T")


async def _gather(calls: Sequence[Callable[[], Awaitable[_T]]]) -> list[_T]:
    """Await all the calls at once; their results in the calls' order; the first error raised."""
    results: list[_T | None] = [None] * len(calls)
    errors: list[Exception] = []

    async def run(index: int, call: Callable[[], Awaitable[_T]]) -> None:
        try:
            results[index] = await call()
        except Exception as exc:  # re-raised below, unwrapped, after the others are cancelled
            errors.append(exc)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for index, call in enumerate(calls):
            nursery.start_soon(run, index, call)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]  # every slot is filled when nothing failed


async def discover_resources(
    api: APIClient, *, scope: DiscoveryScope | None = None, logger: Logger
) -> list[Resource]:
    """The resources of the served group versions in the scope (every group without one)."""
    roots = await _gather(
        [
            lambda: list_core_versions(api, scope=scope, logger=logger),
            lambda: list_group_versions(api, scope=scope, logger=logger),
        ]
    )
    group_versions: list[GroupVersion] = [*roots[0], *roots[1]]

    def scan(group_version: GroupVersion) -> Callable[[], Awaitable[list[Resource]]]:
        return lambda: scan_group_version(api, group_version, logger=logger)

    listings = await _gather([scan(group_version) for group_version in group_versions])
    logger.debug(
        f"Discovered {sum(len(found) for found in listings)} resource(s) in "
        f"{len(group_versions)} group version(s)"
        + (" of all groups." if scope is None else f" in the scope {sorted(scope, key=str)!r}.")
    )
    return [resource for found in listings for resource in found]
