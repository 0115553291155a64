"""The object store behind the fake Kubernetes API: pure logic, no I/O and no trio.

``store`` holds the objects and their semantics; ``catalogue`` the resources; ``selectors`` and
``errors`` what lists, watches and failures look like. Merge and JSON patches are applied with
the engine's own algorithms (``trioperator._engine.patches``), strategic merge patches by
``strategic``; server-side apply and field managers are ``fieldsets`` and ``managedfields``;
``scale`` is the Scale subresource. This package re-exports what the fake API server and the
tests use.
"""

from __future__ import annotations

from trioperator.testing._fakestore.catalogue import ResourceDef, builtin_resources
from trioperator.testing._fakestore.errors import StatusError, not_found, resource_not_found
from trioperator.testing._fakestore.selectors import FieldSelector, LabelSelector
from trioperator.testing._fakestore.store import (
    APPLY_PATCH,
    DEFAULT_MANAGER,
    Change,
    Store,
    watch_event,
)
from trioperator.testing._fakestore.values import JSON, Obj, clone

__all__ = [
    "APPLY_PATCH",
    "DEFAULT_MANAGER",
    "JSON",
    "Change",
    "FieldSelector",
    "LabelSelector",
    "Obj",
    "ResourceDef",
    "StatusError",
    "Store",
    "builtin_resources",
    "clone",
    "not_found",
    "resource_not_found",
    "watch_event",
]
