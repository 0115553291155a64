"""The registry of handlers, and the queries the runtime asks it.

``OperatorRegistry`` holds every handler an operator declared, by kind; decorators fill the
default one unless given ``registry=``. Lookups per (kind, resource) are cached because they are
asked on every watch event while registrations happen only at import time (and sub-handlers live
in their own short-lived ``SubRegistry``).

Sub-handlers: before invoking a resource-changing handler, the runtime opens
``collect_subhandlers(handler)`` (or sets ``subregistry_var`` itself); ``kopf.subhandler()`` and
``kopf.register()`` called by the handler then add ``parent/child`` handlers to that
``SubRegistry``, which the runtime reads after the handler returns. Sync handlers see the same
``SubRegistry`` object through the context copied into their worker thread.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from trioperator._client.resources import DiscoveryScope, Resource
from trioperator._engine.filters import FieldPath, KwargsSource, match, prematch
from trioperator._engine.handlers import (
    Activity,
    ActivityHandler,
    BaseHandler,
    ChangingHandler,
    IndexingHandler,
    ReconcilingHandler,
    RelayingHandler,
    ResourceHandler,
    SpawningHandler,
    WatchingHandler,
    WebhookHandler,
    WebhookType,
)
from trioperator._engine.ids import HandlerId
from trioperator._engine.reasons import HANDLER_REASONS, Reason
from trioperator._engine.selectors import (
    Selector,
    ServedResources,
    discovery_scope,
    resolve_resources,
)

__all__ = [
    "OperatorRegistry",
    "SubRegistry",
    "collect_subhandlers",
    "current_subregistry",
    "get_default_registry",
    "set_default_registry",
    "subregistry_var",
]

H = TypeVar("H", bound=BaseHandler)

# Each handler belongs to exactly one of these categories (subclasses go with their base).
_CATEGORIES: tuple[type[BaseHandler], ...] = (
    ActivityHandler,
    WatchingHandler,
    ChangingHandler,
    SpawningHandler,
    IndexingHandler,
    WebhookHandler,
    ReconcilingHandler,
    RelayingHandler,
)


def _category_of(kind: type[BaseHandler]) -> type[BaseHandler]:
    for category in _CATEGORIES:
        if issubclass(kind, category):
            return category
    raise TypeError(f"Unsupported handler kind: {kind!r}")


def _is_deleted(body: Any) -> bool:
    try:
        return bool(body.get("metadata", {}).get("deletionTimestamp"))
    except AttributeError:
        return False


def _dedup_key(handler: BaseHandler) -> tuple[HandlerId, int]:
    # The same function registered by several decorators (e.g. on.create + on.resume) runs once
    # per cause. As in Kopf, "the same" is the same object: bound methods are new objects on
    # each attribute access, so one method given to two decorators is two handlers (Kopf calls
    # it twice too). The handlers keep their functions alive, so the ids stay unique.
    return handler.id, id(handler.fn)


def _fits_cause(
    handler: ChangingHandler,
    *,
    reason: Reason,
    initial: bool,
    deleted: bool,
) -> bool:
    if handler.reason is not None and handler.reason != reason:
        return False
    if handler.initial and not initial:
        return False  # resuming happens only while the object is first seen by this process
    # Resume handlers may allocate what delete handlers free; so no resuming of deleted objects,
    # unless explicitly declared safe.
    return not (handler.initial and deleted and not handler.deleted)


def _select_changing(
    handlers: Iterable[ChangingHandler],
    *,
    reason: Reason,
    body: Any,
    old: Any,
    new: Any,
    diff: Any,
    initial: bool,
    deleted: bool | None,
    kwargs: KwargsSource,
    excluded: Collection[str],
) -> list[ChangingHandler]:
    if reason not in HANDLER_REASONS:
        return []  # informational causes (noop, free, gone) have no handlers
    real_deleted = _is_deleted(body) if deleted is None else deleted
    selected: list[ChangingHandler] = []
    seen: set[tuple[HandlerId, int]] = set()
    for handler in handlers:
        if handler.id in excluded:
            continue
        if not _fits_cause(handler, reason=reason, initial=initial, deleted=real_deleted):
            continue
        key = _dedup_key(handler)
        if key in seen:
            continue
        if match(handler, body=body, old=old, new=new, diff=diff, kwargs=kwargs):
            seen.add(key)
            selected.append(handler)
    return selected


def _select_matching(
    handlers: Iterable[H],
    *,
    body: Any,
    kwargs: KwargsSource,
    excluded: Collection[str] = (),
) -> list[H]:
    selected: list[H] = []
    seen: set[tuple[HandlerId, int]] = set()
    for handler in handlers:
        if handler.id in excluded:
            continue
        key = _dedup_key(handler)
        if key in seen:
            continue
        assert isinstance(handler, ResourceHandler)
        if match(handler, body=body, kwargs=kwargs):
            seen.add(key)
            selected.append(handler)
    return selected


class OperatorRegistry:
    """All handlers of an operator: activities and resource handlers of every kind."""

    def __init__(self) -> None:
        self._handlers: dict[type[BaseHandler], list[BaseHandler]] = {c: [] for c in _CATEGORIES}
        self._cache: dict[tuple[type[BaseHandler], Resource | None], tuple[BaseHandler, ...]] = {}
        # Per resource: the handlers the fields were collected from (a new tuple after any
        # registration), and the fields.
        self._extra_fields: dict[Resource, tuple[Sequence[BaseHandler], frozenset[FieldPath]]] = {}
        self._labels_only: dict[
            Resource, tuple[Sequence[BaseHandler], Sequence[BaseHandler], bool]
        ] = {}
        # Per resource: the changing handlers the answer was computed from, and whether one of
        # them has no filter at all (then every object is in scope: no per-object check).
        self._unfiltered: dict[Resource, tuple[Sequence[BaseHandler], bool]] = {}

    def __repr__(self) -> str:
        counts = ", ".join(
            f"{category.__name__}={len(handlers)}"
            for category, handlers in self._handlers.items()
            if handlers
        )
        return f"<{type(self).__name__} {counts or 'empty'}>"

    def __len__(self) -> int:
        """How many handlers of all kinds are registered."""
        return sum(len(handlers) for handlers in self._handlers.values())

    # -------------------------------------------------------------------------- registration

    def append(self, handler: BaseHandler) -> None:
        """Add a handler (decorators do this); the order of registration is kept."""
        if not isinstance(handler, BaseHandler):
            raise TypeError(f"Only handlers can be registered, got {handler!r}.")
        self._handlers[_category_of(type(handler))].append(handler)
        self._cache.clear()

    # ------------------------------------------------------------------------------ plain lookups

    def iter_all_handlers(self) -> Iterator[BaseHandler]:
        """Every registered handler, of every kind."""
        for handlers in self._handlers.values():
            yield from handlers

    def get_handlers(self, kind: type[H], resource: Resource | None = None) -> Sequence[H]:
        """Handlers of a kind (a handler class, e.g. ``DaemonHandler``), in registration order.

        With ``resource``, only those whose selector accepts that resource.
        """
        key: tuple[type[BaseHandler], Resource | None] = (kind, resource)
        cached = self._cache.get(key)
        if cached is None:
            cached = tuple(
                handler
                for handler in self._handlers[_category_of(kind)]
                if isinstance(handler, kind)
                and (
                    resource is None
                    or not isinstance(handler, ResourceHandler)
                    or handler.selector is None
                    or handler.selector.check(resource)
                )
            )
            self._cache[key] = cached
        # (No typing.cast: a function call on every lookup, and lookups are per event.)
        return cached  # type: ignore[return-value]

    def get_activity_handlers(self, activity: Activity) -> list[ActivityHandler]:
        selected: list[ActivityHandler] = []
        seen: set[tuple[HandlerId, int]] = set()
        for handler in self.get_handlers(ActivityHandler):
            key = _dedup_key(handler)
            if handler.activity == activity and key not in seen:
                seen.add(key)
                selected.append(handler)
        return selected

    # These are asked for every event: straight to the cached lookup.
    def has_watching_handlers(self, resource: Resource) -> bool:
        return bool(self.get_handlers(WatchingHandler, resource))

    def has_changing_handlers(self, resource: Resource) -> bool:
        return bool(self.get_handlers(ChangingHandler, resource))

    def has_spawning_handlers(self, resource: Resource) -> bool:
        return bool(self.get_handlers(SpawningHandler, resource))

    def has_indexing_handlers(self, resource: Resource) -> bool:
        return bool(self.get_handlers(IndexingHandler, resource))

    def has_relaying_handlers(self, resource: Resource) -> bool:
        return bool(self.get_handlers(RelayingHandler, resource))

    def is_relayed_only(self, resource: Resource) -> bool:
        """Whether a resource is watched only to enqueue other objects (a child resource
        without handlers of its own): its events need no workers."""
        if not self.has_relaying_handlers(resource):
            return False
        kinds: tuple[type[BaseHandler], ...] = (
            WatchingHandler,
            ChangingHandler,
            SpawningHandler,
            IndexingHandler,
            ReconcilingHandler,
        )
        return not any(self.get_handlers(kind, resource) for kind in kinds)

    def get_extra_fields(self, resource: Resource) -> frozenset[FieldPath]:
        """Fields that changing handlers watch: the diff-base must keep them in the essence
        even where it normally ignores a stanza (e.g. ``field='status.phase'``)."""
        handlers = self.get_handlers(ChangingHandler, resource)
        cached = self._extra_fields.get(resource)
        if cached is None or cached[0] is not handlers:
            fields = frozenset(handler.field for handler in handlers if handler.field is not None)
            cached = self._extra_fields[resource] = (handlers, fields)
        return cached[1]

    def finalizer_follows_labels(self, resource: Resource) -> bool:
        """Whether the need for our finalizer depends on nothing of an object but its labels.

        True when no handler that requires the finalizer filters by annotations, by a field's
        value, by a ``when`` callback or by a label callback (any of which may look at the
        status or the annotations). Then a write of only those leaves the need as it was.
        """
        changing = self.get_handlers(ChangingHandler, resource)
        spawning = self.get_handlers(SpawningHandler, resource)
        cached = self._labels_only.get(resource)
        if cached is None or cached[0] is not changing or cached[1] is not spawning:
            handlers: list[ChangingHandler | SpawningHandler] = [*changing, *spawning]
            requiring = [h for h in handlers if h.requires_finalizer]
            static = all(
                h.when is None
                and h.annotations is None
                and h.field is None
                and not any(callable(value) for value in (h.labels or {}).values())
                for h in requiring
            )
            cached = self._labels_only[resource] = (changing, spawning, static)
        return cached[2]

    # ------------------------------------------------------------------------------- selectors

    def get_selectors(self, kind: type[ResourceHandler] = ResourceHandler) -> frozenset[Selector]:
        """Selectors of resource handlers of that kind (of all kinds by default)."""
        selectors: set[Selector] = set()
        for category in _CATEGORIES:
            if issubclass(category, ResourceHandler):
                for handler in self._handlers[category]:
                    if isinstance(handler, kind):
                        assert isinstance(handler, ResourceHandler)
                        if handler.selector is not None:
                            selectors.add(handler.selector)
        return frozenset(selectors)

    @property
    def selectors(self) -> frozenset[Selector]:
        """All selectors of all resource handlers: what discovery must look for."""
        return self.get_selectors()

    def discovery_scope(self, *, extra_groups: Iterable[str] = ()) -> DiscoveryScope | None:
        """The group versions worth discovering for the handlers registered now (``None``:
        every group), plus ``extra_groups`` in full."""
        return discovery_scope(self.selectors, extra_groups=extra_groups)

    def resolve_resources(self, resources: Collection[Resource]) -> ServedResources:
        """What to serve among the discovered resources, and the warnings to log."""
        return resolve_resources(
            resources,
            watching=self.get_selectors(WatchingHandler),
            changing=self.get_selectors(ChangingHandler),
            spawning=self.get_selectors(SpawningHandler),
            indexing=self.get_selectors(IndexingHandler),
            webhooks=self.get_selectors(WebhookHandler),
            reconciling=self.get_selectors(ReconcilingHandler),
            relaying=self.get_selectors(RelayingHandler),
        )

    # ------------------------------------------------------------------------ filtered queries

    def iter_watching_handlers(
        self,
        *,
        resource: Resource,
        body: Any,
        kwargs: KwargsSource,
    ) -> list[WatchingHandler]:
        """``on.event`` handlers matching this object now."""
        handlers = self.get_handlers(WatchingHandler, resource)
        return _select_matching(handlers, body=body, kwargs=kwargs)

    def iter_indexing_handlers(
        self,
        *,
        resource: Resource,
        body: Any,
        kwargs: KwargsSource,
    ) -> list[IndexingHandler]:
        """Indexers matching this object now (the others must drop its values)."""
        handlers = self.get_handlers(IndexingHandler, resource)
        return _select_matching(handlers, body=body, kwargs=kwargs)

    def iter_spawning_handlers(
        self,
        *,
        resource: Resource,
        body: Any,
        kwargs: KwargsSource,
        excluded: Collection[str] = (),
    ) -> list[SpawningHandler]:
        """Daemons/timers matching this object now (to spawn; running others are to be stopped).

        ``excluded``: ids not to consider, e.g. daemons that exited for good.
        """
        handlers = self.get_handlers(SpawningHandler, resource)
        return _select_matching(handlers, body=body, kwargs=kwargs, excluded=excluded)

    def iter_changing_handlers(
        self,
        *,
        resource: Resource,
        reason: Reason,
        body: Any,
        old: Any,
        new: Any,
        diff: Any,
        initial: bool,
        kwargs: KwargsSource,
        deleted: bool | None = None,
        excluded: Collection[str] = (),
    ) -> list[ChangingHandler]:
        """Resource-changing handlers for a detected cause, filtered and de-duplicated.

        ``reason`` is the detected cause; handlers declared for any cause (resume, field) are
        mixed in. ``initial`` is true while the object is first seen by this process (enables
        resume handlers). ``deleted`` defaults to whether ``body`` has a deletion timestamp.
        ``old``/``new`` are the whole-object essences of the cause (``old`` is ``None`` on
        creation). The same function under the same id is returned once.
        """
        return _select_changing(
            self.get_handlers(ChangingHandler, resource),
            reason=reason,
            body=body,
            old=old,
            new=new,
            diff=diff,
            initial=initial,
            deleted=deleted,
            kwargs=kwargs,
            excluded=excluded,
        )

    def iter_webhook_handlers(
        self,
        *,
        resource: Resource,
        body: Any,
        kwargs: KwargsSource,
        webhook_type: WebhookType | None = None,
        webhook_id: str | None = None,
        operation: str | None = None,
        subresource: str | None = None,
    ) -> list[WebhookHandler]:
        """Admission handlers for one admission request.

        ``webhook_id`` narrows to the handler addressed by the request's URL path.
        ``operation``/``subresource`` come from the request (``subresource=None``: main body).
        """
        selected: list[WebhookHandler] = []
        for handler in self.get_handlers(WebhookHandler, resource):
            if webhook_type is not None and handler.reason != webhook_type:
                continue
            if webhook_id is not None and handler.id != webhook_id:
                continue
            operations = handler.operations
            if operation is not None and operations is not None and operation not in operations:
                continue
            if handler.subresource is None:
                if subresource is not None:
                    continue
            elif handler.subresource != "*" and handler.subresource != subresource:
                continue
            selected.append(handler)
        return _select_matching(selected, body=body, kwargs=kwargs)

    def changing_unfiltered(self, resource: Resource) -> bool:
        """Whether some resource-changing handler of the resource has no filter at all (labels,
        annotations, field, ``when``): then every object is in their scope. Cached."""
        handlers = self.get_handlers(ChangingHandler, resource)
        cached = self._unfiltered.get(resource)
        if cached is None or cached[0] is not handlers:
            unfiltered = any(
                not handler.labels
                and not handler.annotations
                and handler.field is None
                and handler.when is None
                for handler in handlers
            )
            cached = self._unfiltered[resource] = (handlers, unfiltered)
        return cached[1]

    def prematch_changing(self, *, resource: Resource, body: Any, kwargs: KwargsSource) -> bool:
        """Whether some resource-changing handler of the resource takes this object in, by its
        current state alone (labels, annotations, field values, ``when``; no change checks).

        As in Kopf, an object that none of them takes in is not handled at all ("stealth
        mode"): no cause is handled or logged, no diff-base or progress is stored, so when it
        starts to match later, that is its creation.
        """
        if self.changing_unfiltered(resource):
            return True
        handlers = self.get_handlers(ChangingHandler, resource)
        return any(prematch(handler, body=body, kwargs=kwargs) for handler in handlers)

    def requires_finalizer(
        self,
        *,
        resource: Resource,
        body: Any,
        kwargs: KwargsSource,
        excluded: Collection[str] = (),
    ) -> bool:
        """Whether this object needs our finalizer: some matching non-optional delete handler,
        or some matching daemon/timer (to stop it before the object is gone).

        Filters are checked against the current body only. ``excluded``: ids to disregard,
        e.g. daemons that exited for good.
        """
        candidates: list[ChangingHandler | SpawningHandler] = [
            *self.get_handlers(ChangingHandler, resource),
            *self.get_handlers(SpawningHandler, resource),
        ]
        for handler in candidates:
            if not handler.requires_finalizer or handler.id in excluded:
                continue
            if prematch(handler, body=body, kwargs=kwargs):
                return True
        return False


# ------------------------------------------------------------------------------- sub-handlers


class SubRegistry:
    """The sub-handlers declared by one invocation of a resource-changing handler."""

    def __init__(self, parent: ChangingHandler) -> None:
        self.parent = parent
        self._handlers: list[ChangingHandler] = []

    def __repr__(self) -> str:
        return f"<SubRegistry of {self.parent.id!r}: {[h.id for h in self._handlers]!r}>"

    def __len__(self) -> int:
        return len(self._handlers)

    def __iter__(self) -> Iterator[ChangingHandler]:
        return iter(self._handlers)

    @property
    def handlers(self) -> tuple[ChangingHandler, ...]:
        return tuple(self._handlers)

    @property
    def ids(self) -> tuple[HandlerId, ...]:
        """The ids to remember as the parent's sub-references (to purge their state later)."""
        return tuple(handler.id for handler in self._handlers)

    def append(self, handler: ChangingHandler) -> None:
        if not isinstance(handler, ChangingHandler):
            raise TypeError(f"Sub-handlers must be resource-changing handlers, got {handler!r}.")
        self._handlers.append(handler)

    def iter_handlers(
        self,
        *,
        reason: Reason,
        body: Any,
        old: Any,
        new: Any,
        diff: Any,
        initial: bool,
        kwargs: KwargsSource,
        deleted: bool | None = None,
        excluded: Collection[str] = (),
    ) -> list[ChangingHandler]:
        """The sub-handlers to run for the parent's cause, filtered and de-duplicated."""
        return _select_changing(
            self._handlers,
            reason=reason,
            body=body,
            old=old,
            new=new,
            diff=diff,
            initial=initial,
            deleted=deleted,
            kwargs=kwargs,
            excluded=excluded,
        )


subregistry_var: contextvars.ContextVar[SubRegistry] = contextvars.ContextVar(
    "trioperator.subregistry"
)
"""The sub-registry of the resource-changing handler running in this context (if any)."""


def current_subregistry() -> SubRegistry:
    """The running handler's sub-registry, or a clear error when called outside of a handler."""
    try:
        return subregistry_var.get()
    except LookupError:
        raise RuntimeError(
            "Sub-handlers can be declared (kopf.subhandler/kopf.register) only while "
            "a resource-changing handler is running."
        ) from None


@contextlib.contextmanager
def collect_subhandlers(parent: ChangingHandler) -> Iterator[SubRegistry]:
    """Make a fresh ``SubRegistry`` current for the duration of the parent's invocation."""
    subregistry = SubRegistry(parent)
    token = subregistry_var.set(subregistry)
    try:
        yield subregistry
    finally:
        subregistry_var.reset(token)


# ---------------------------------------------------------------------------- default registry

_default_registry: OperatorRegistry | None = None


def get_default_registry() -> OperatorRegistry:
    """The registry that decorators and the operator use unless given one explicitly."""
    global _default_registry
    if _default_registry is None:
        _default_registry = OperatorRegistry()
    return _default_registry


def set_default_registry(registry: OperatorRegistry) -> None:
    """Replace the default registry (e.g. for isolation in tests or several operators)."""
    global _default_registry
    if not isinstance(registry, OperatorRegistry):
        raise TypeError(f"Expected an OperatorRegistry, got {registry!r}.")
    _default_registry = registry
