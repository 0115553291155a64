"""The patch applier: everything one processing cycle produced, in the fewest API calls.

Order: (1) merge-patch of the ``status`` subresource when the resource has one, (2) merge-patch
of the body, (3) a JSON-patch built from the transformation functions against the freshest body
we know, guarded by a ``test`` of ``metadata.resourceVersion`` (so a concurrent change makes it
fail with 422 instead of overwriting someone else's edit), again status first. On 422 the
functions are kept and retried on the next cycle, against the newer state.

Why the status goes first: the status holds the handlers' results, the body holds the marks
that say "handled" (the diff-base annotation, the progress annotations). The status write also
carries the journal of the body write (``_engine/journal.py``, put there by the processing):
if the process dies between the two, the next operator finds the results and completes the
body write from the journal, without running the handlers again. (The other order would lose
the results for good: the marks alone say "handled".) Without a status subresource, everything
is one merge-patch and the question never arises. The transformation functions (finalizers)
come last, guarded by the resourceVersion; adding or removing a finalizer again is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from trioperator._client.api import APIClient
from trioperator._client.errors import APINotFoundError, APIUnprocessableEntityError
from trioperator._client.resources import Resource
from trioperator._engine.bodies import RawBody
from trioperator._engine.patches import (
    Patch,
    PatchFn,
    build_json_patch,
    split_json_patch_status,
    split_status,
)

Payload: TypeAlias = Mapping[str, Any] | list[dict[str, Any]]
"""A merge-patch (a mapping) or a JSON-patch (a list of operations)."""


@dataclass
class PatchResult:
    """What the API server said after applying one cycle's patch."""

    resource_version: str | None = None
    """The version of our last successful write (to be awaited on the stream), if any."""

    earlier_versions: list[str] = field(default_factory=list)
    """The versions of our writes before the last one (e.g. of the status, then the body came)."""

    body: RawBody | None = None
    """The freshest body returned by the API, if anything was written."""

    remaining_fns: list[PatchFn] = field(default_factory=list)
    """Transformation functions rejected by a failed ``test`` (422), to retry next cycle."""

    gone: bool = False
    """The object disappeared (404) while we were patching it."""


async def apply_patch(
    api: APIClient,
    *,
    resource: Resource,
    body: RawBody,
    patch: Patch,
    logger: logging.LoggerAdapter[logging.Logger] | logging.Logger,
) -> PatchResult:
    """Apply ``patch`` to the object ``body`` describes; make no API call for an empty patch."""
    result = PatchResult()
    if not patch:
        return result
    metadata = body.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = metadata["name"]
    freshest = body
    written: list[RawBody] = []  # the API's answers to our writes, in order
    has_status = "status" in resource.subresources
    if has_status:
        body_patch, status_patch = split_status(patch)
    else:
        body_patch, status_patch = dict(patch), {}
    # The patches' reprs are built only when they are shown (they cost as much as the JSON).
    debug = logger.isEnabledFor(logging.DEBUG)

    async def write(payload: Payload, *, status: bool, json_patch: bool = False) -> None:
        """One write of the four below: the status or the body, merge- or JSON-patch."""
        nonlocal freshest
        if debug:
            part = " the status" if status else ""
            kind = " JSON-patch" if json_patch else ""
            logger.debug(f"Patching{part} with{kind}: {payload!r}")
        freshest = await api.patch(
            resource,
            namespace=namespace,
            name=name,
            payload=payload,
            json_patch=json_patch,
            subresource="status" if status else None,
            echo_after=_version(freshest),
            logger=logger,
        )
        written.append(freshest)

    try:
        if status_patch:
            await write(status_patch, status=True)
        if body_patch:
            await write(body_patch, status=False)
        if patch.fns:
            ops = build_json_patch(freshest, patch.fns, resource_version=_version(freshest))
            main_ops, status_ops = split_json_patch_status(ops) if has_status else (ops, [])
            try:
                if status_ops:
                    await write(status_ops, status=True, json_patch=True)
                if main_ops:
                    if status_ops and main_ops[0].get("op") == "test":
                        # The first part changed the version: guard against later changes only.
                        main_ops[0] = {**main_ops[0], "value": _version(freshest)}
                    await write(main_ops, status=False, json_patch=True)
            except APIUnprocessableEntityError as exc:
                logger.debug(
                    f"JSON-patch was rejected ({exc}); the changes will be retried next time."
                )
                result.remaining_fns = list(patch.fns)
    except APINotFoundError:
        logger.debug("Patching failed: the object is gone (404).")
        result.gone = True
        return result
    if freshest is not body:
        result.body = freshest
        result.resource_version = _version(freshest)
        for answer in written[:-1]:
            version = _version(answer)
            if isinstance(version, str) and version != result.resource_version:
                result.earlier_versions.append(version)
    return result


def _version(body: RawBody) -> str | None:
    return (body.get("metadata") or {}).get("resourceVersion")
