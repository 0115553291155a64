"""Objects that leave a server-side selection while they hold our finalizer.

With a label or field selector on the watch (docs/selectors.md), the API server reports an
object whose change takes it out of the selection as ``DELETED`` (with its last selected
state), and then nothing more of it: not its later deletion either. Had it kept our finalizer,
its deletion would wait for a release that never comes.

Without the selector, the same change would have arrived as a modification that no handler
matches any more, and the framework would have released the finalizer then (as Kopf does when
no handler requires it). This module does the same for a departure: a ``DELETED`` event whose
object still holds our finalizer cannot be a real deletion (the API server deletes an object
only once its finalizers are gone), so it is a departure; the object is read again and, if it is
still outside the selection and still holds our finalizer, the finalizer is removed by a patch
that carries the version read (a concurrent change -- e.g. the label coming back -- makes it
fail with a conflict, and the check starts over).

Only the resource's own selection counts here, not a shard's (see docs/sharding.md): an object
that moves to another replica stays selected for the ring, and keeps its finalizer.
"""

from __future__ import annotations

from typing import Any, Final

from trioperator._client.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APINotFoundError,
)
from trioperator._client.settings import WatchSelector
from trioperator._engine.finalizers import is_deletion_blocked
from trioperator._runtime.handling.loggers import ObjectLogger
from trioperator._runtime.pipeline.contexts import ResourceContext

__all__ = ["is_departure", "release_departed"]

ATTEMPTS: Final = 5
"""Conflicts in a row (the object keeps changing) before the release is given up (logged)."""


def is_departure(ctx: ResourceContext, body: dict[str, Any]) -> bool:
    """Whether a ``DELETED`` event is an object leaving the selection with our finalizer."""
    return is_deletion_blocked(body, ctx.settings.persistence.finalizer)


async def release_departed(
    ctx: ResourceContext, selection: WatchSelector, body: dict[str, Any]
) -> None:
    """Remove our finalizer from an object that has left ``selection`` (see the module)."""
    logger = ObjectLogger(body)
    meta = body.get("metadata") or {}
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not isinstance(name, str):
        return
    finalizer = ctx.settings.persistence.finalizer
    try:
        for _ in range(ATTEMPTS):
            try:
                current = await ctx.api.get(ctx.resource, namespace=namespace, name=name)
            except APINotFoundError:
                return  # gone meanwhile: nothing holds it
            current_meta = current.get("metadata") or {}
            if uid is not None and current_meta.get("uid") != uid:
                return  # another object of the same name: not ours to touch
            if not is_deletion_blocked(current, finalizer):
                return
            if await _is_selected(ctx, selection, name, namespace, uid):
                return  # back within the selection (or never left it): it is served
            remaining = [item for item in current_meta.get("finalizers") or [] if item != finalizer]
            patch = {
                "metadata": {
                    "resourceVersion": current_meta.get("resourceVersion"),
                    "finalizers": remaining or None,
                }
            }
            try:
                await ctx.api.patch(ctx.resource, namespace=namespace, name=name, payload=patch)
            except APIConflictError:
                continue  # changed since it was read: look again
            except APINotFoundError:
                return
            logger.info(
                "Removed the finalizer: the object has left the watched selection"
                f" ({_describe(selection)}), so no handler serves it any more."
            )
            return
        logger.error(
            f"Could not remove the finalizer of an object that left the watched selection: it"
            f" changed {ATTEMPTS} times in a row while being released. Its deletion waits for"
            " the finalizer to be removed."
        )
    except (APIError, APIConnectionError) as exc:
        logger.error(
            "Could not remove the finalizer of an object that left the watched selection"
            f" ({exc}). Its deletion waits for the finalizer to be removed."
        )


async def _is_selected(
    ctx: ResourceContext,
    selection: WatchSelector,
    name: str,
    namespace: str | None,
    uid: str | None,
) -> bool:
    """Whether the API server lists the object within the selection now (it evaluates the
    selectors itself: no client-side copy of its field-selector semantics)."""
    by_name = f"metadata.name={name}"
    fields = f"{selection.fields},{by_name}" if selection.fields else by_name
    items, _ = await ctx.api.list_objs(
        ctx.resource, namespace=namespace, label_selector=selection.labels, field_selector=fields
    )
    return any((item.get("metadata") or {}).get("uid") == uid for item in items)


def _describe(selection: WatchSelector) -> str:
    parts = [f"labels {selection.labels!r}" if selection.labels else ""]
    parts.append(f"fields {selection.fields!r}" if selection.fields else "")
    return ", ".join(part for part in parts if part)
