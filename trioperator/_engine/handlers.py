"""Handlers: a user's function together with everything its decorator said about it.

Handlers are immutable records; the registry holds them, the runtime reads them. They compare
and hash by identity (one registration is one handler), since several of their options hold
dicts and callables that have no meaningful value equality.

This module also builds handler ids and validates decorator options, so that both the public
decorators and the runtime (e.g. ``execute(fns=...)``) create handlers the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, ClassVar, Final, Literal, TypeAlias

from trioperator._engine.errors import ErrorsMode
from trioperator._engine.filters import (
    PRESENT,
    FieldPath,
    FieldSpec,
    MetaFilter,
    MetaFilterToken,
    ValueFilter,
    WhenFilterFn,
    parse_field,
)
from trioperator._engine.flavors import Flavor, check_flavor, is_async_callable
from trioperator._engine.ids import HandlerId
from trioperator._engine.reasons import Reason
from trioperator._engine.selectors import Selector

__all__ = [
    "OPERATIONS",
    "ReconcilingHandler",
    "RelayingHandler",
    "Activity",
    "ActivityHandler",
    "BaseHandler",
    "ChangingHandler",
    "DaemonHandler",
    "DelayFn",
    "IndexingHandler",
    "ResourceHandler",
    "SpawningHandler",
    "TimerHandler",
    "WatchingHandler",
    "WebhookHandler",
    "WebhookOperation",
    "WebhookType",
    "build_subhandler",
    "check_bool",
    "check_common_options",
    "check_delay",
    "check_filters",
    "check_operations",
    "check_seconds",
    "generate_id",
    "get_callable_id",
]


class Activity(enum.StrEnum):
    """Operator-level (not per-object) activities."""

    STARTUP = "startup"
    CLEANUP = "cleanup"
    AUTHENTICATION = "authentication"
    PROBE = "probe"


class WebhookType(enum.StrEnum):
    """The two kinds of admission webhooks."""

    VALIDATING = "validating"
    MUTATING = "mutating"


WebhookOperation: TypeAlias = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: Final[frozenset[str]] = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})

DelayFn: TypeAlias = Callable[..., float]
"""``initial_delay=`` as a callable: gets the handler's kwargs, returns seconds."""


# ----------------------------------------------------------------------------------- handlers


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class BaseHandler:
    """Options every handler has. ``None`` means "the framework's default for this kind"."""

    fn: Callable[..., Any]
    id: HandlerId
    param: Any = None
    errors: ErrorsMode | None = None
    timeout: float | None = None
    retries: int | None = None
    backoff: float | None = None
    flavor: Flavor | None = None
    """The library the (async) function is written for; ``None``: as the settings say."""

    _noun: ClassVar[str] = "Handler"
    """How logs name a handler of this kind (as Kopf's do): ``Daemon 'x'``, ``Handler 'y'``."""

    def __str__(self) -> str:
        return f"{self._noun} {self.id!r}"

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether calling ``fn`` gives a coroutine: looked up once (``fn`` is fixed), not at
        every call of the handler (every run of every timer)."""
        return is_async_callable(self.fn)


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class ActivityHandler(BaseHandler):
    """``on.startup``, ``on.cleanup``, ``on.login``, ``on.probe``."""

    _noun: ClassVar[str] = "Activity"
    activity: Activity


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class ResourceHandler(BaseHandler):
    """Handlers bound to resources, with the object filters.

    ``selector`` is ``None`` only for sub-handlers, which inherit the parent's resource.
    ``field`` is a parsed path (``('spec', 'x')``) or ``None``.
    """

    selector: Selector | None = None
    labels: MetaFilter | None = None
    annotations: MetaFilter | None = None
    when: WhenFilterFn | None = None
    field: FieldPath | None = None
    value: ValueFilter = None


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class WatchingHandler(ResourceHandler):
    """``on.event``: every raw watch event, no state kept on the object."""


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class IndexingHandler(ResourceHandler):
    """``index``: in-memory indices, named by the handler id."""

    _noun: ClassVar[str] = "Indexer"


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class ChangingHandler(ResourceHandler):
    """``on.create/update/delete/resume/field`` and sub-handlers.

    ``reason`` is the cause it reacts to, or ``None`` for any cause (``on.resume``, ``on.field``,
    sub-handlers). ``initial`` marks resume handlers: they run only while the object is first
    seen by this process, and on deletion only if ``deleted`` is true. ``field_needs_change``
    marks update-like handlers: with a ``field``, they run only when that field changes, and
    their ``value=``/``old=``/``new=`` filters look at both sides of the change.
    """

    reason: Reason | None
    initial: bool | None = None
    deleted: bool | None = None
    requires_finalizer: bool | None = None
    field_needs_change: bool | None = None
    old: ValueFilter = None
    new: ValueFilter = None


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class SpawningHandler(ResourceHandler):
    """Daemons and timers: long-lived per-object activities; they always need a finalizer."""

    requires_finalizer: bool = True
    initial_delay: float | DelayFn | None = None


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class DaemonHandler(SpawningHandler):
    """``daemon``: runs until the object is deleted or the operator exits."""

    _noun: ClassVar[str] = "Daemon"

    cancellation_backoff: float | None = None
    cancellation_timeout: float | None = None
    cancellation_polling: float | None = None


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class TimerHandler(SpawningHandler):
    """``timer``: runs every ``interval`` seconds, optionally after ``idle`` seconds of calm."""

    _noun: ClassVar[str] = "Timer"

    interval: float | None = None
    sharp: bool | None = None
    idle: float | None = None


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class WebhookHandler(ResourceHandler):
    """``on.validate``/``on.mutate``.

    ``operations=None`` means all operations. ``subresource=None`` means the main body only,
    ``'*'`` means the body and every subresource.
    """

    _noun: ClassVar[str] = "Webhook"

    reason: WebhookType
    operations: frozenset[str] | None = None
    subresource: str | None = None
    persistent: bool = False
    side_effects: bool = False
    ignore_failures: bool = False


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class ReconcilingHandler(ResourceHandler):
    """``on.reconcile`` (trioperator's own): the current state of an object, whenever it or
    what it owns changes; level-based, coalesced per object, no progress kept on the object.

    ``owns``: selectors of child resources whose controller ownerReference enqueues the owner;
    ``watches``: selectors of other resources with a mapper (body -> keys of objects); ``resync``:
    every object is run again this often (seconds). No finalizer of its own: a run for an
    object being deleted is told ``deleting=True``; to hold the deletion until cleanup is done,
    an ``on.delete`` handler keeps Kopf's finalizer, by Kopf's rules (docs/reconcile.md).
    """

    _noun: ClassVar[str] = "Reconciler"

    owns: tuple[Selector, ...] = ()
    watches: tuple[tuple[Selector, Callable[..., Any]], ...] = ()
    resync: float | None = None


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class RelayingHandler(ResourceHandler):
    """Internal, registered by ``on.reconcile(owns=..., watches=...)``: events of ``selector``'s
    objects are turned into requests to reconcile objects of ``target``.

    ``fn`` is the mapper (body -> keys); with ``by_owner`` (``owns=``) it is the reconcile
    handler's own function, unused: the child's controller ownerReference names the owner.
    One watch per child resource serves every relay of it.
    """

    _noun: ClassVar[str] = "Relay"

    target: Selector
    by_owner: bool = False


# ----------------------------------------------------------------------------------------- ids


def get_callable_id(fn: Callable[..., Any]) -> str:
    """A name for a callable that stays the same across restarts (it keys stored progress).

    Partials and ``functools.wraps`` wrappers are named after what they wrap; lambdas after
    their source location (the best available without a name).
    """
    seen: set[int] = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__  # type: ignore[attr-defined]
        else:
            break

    if isinstance(fn, types.FunctionType) and fn.__name__ == "<lambda>":
        return f"lambda:{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
    qualname = getattr(fn, "__qualname__", None)
    if isinstance(qualname, str):
        return qualname
    if callable(fn):
        # A callable object: its class is the most stable name there is.
        return type(fn).__qualname__
    raise TypeError(f"Cannot build a handler id for a non-callable: {fn!r}")


def generate_id(
    fn: Callable[..., Any],
    *,
    id: str | None = None,
    prefix: str | None = None,
    suffix: str | None = None,
) -> HandlerId:
    """``[prefix/](id or the callable's name)[/suffix]``."""
    real_id = id if id is not None else get_callable_id(fn)
    if suffix:
        real_id = f"{real_id}/{suffix}"
    if prefix:
        real_id = f"{prefix}/{real_id}"
    return HandlerId(real_id)


# ----------------------------------------------------------------------------- option checks


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_number(
    name: str,
    value: object,
    *,
    positive: bool = False,
    integer: bool = False,
) -> None:
    if value is None:
        return
    if integer and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{name}= must be an integer or None, got {value!r}.")
    if not _is_number(value):
        raise TypeError(f"{name}= must be a number of seconds or None, got {value!r}.")
    assert isinstance(value, (int, float))
    if value != value:  # NaN would silently break every comparison downstream
        raise ValueError(f"{name}= cannot be NaN.")
    if positive and value <= 0:
        raise ValueError(f"{name}= must be positive, got {value!r}.")
    if value < 0:
        raise ValueError(f"{name}= cannot be negative, got {value!r}.")


def check_seconds(name: str, value: object, *, positive: bool = False) -> None:
    """A duration option: a number of seconds (non-negative, or positive) or ``None``."""
    _check_number(name, value, positive=positive)


def check_bool(name: str, value: object) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name}= must be True, False, or None, got {value!r}.")


def check_delay(name: str, value: object) -> None:
    """``initial_delay=``: seconds, or a callable returning them."""
    if value is None or callable(value):
        return
    _check_number(name, value)


def check_common_options(
    *,
    id: str | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
) -> None:
    """Validate the options shared by all handlers: ``id, errors, timeout, retries, backoff``."""
    if id is not None:
        if not isinstance(id, str):
            raise TypeError(f"id= must be a string, got {id!r}.")
        if not id:
            raise ValueError("id= cannot be an empty string.")
    if errors is not None and not isinstance(errors, ErrorsMode):
        raise TypeError(f"errors= must be a kopf.ErrorsMode, got {errors!r}.")
    _check_number("timeout", timeout)
    _check_number("retries", retries, integer=True)
    _check_number("backoff", backoff)


def _check_meta_filter(name: str, criteria: object, *, stacklevel: int) -> MetaFilter | None:
    if criteria is None:
        return None
    if not isinstance(criteria, Mapping):
        raise TypeError(f"{name}= must be a mapping of names to criteria, got {criteria!r}.")
    checked: dict[str, Any] = {}
    for key, criterion in criteria.items():
        if not isinstance(key, str):
            raise TypeError(f"{name}= keys must be strings, got {key!r}.")
        if criterion is None:
            warnings.warn(
                f"None as a {name}= criterion is deprecated; use kopf.PRESENT.",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
            criterion = PRESENT
        elif not (isinstance(criterion, (str, MetaFilterToken)) or callable(criterion)):
            raise TypeError(
                f"{name}={{{key!r}: ...}} must be a string, kopf.PRESENT, kopf.ABSENT, "
                f"or a callable, got {criterion!r}."
            )
        checked[key] = criterion
    return types.MappingProxyType(checked)


def check_filters(
    *,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter = None,
    old: ValueFilter = None,
    new: ValueFilter = None,
    stacklevel: int = 1,
) -> dict[str, Any]:
    """Validate the object filters; return a handler's filter fields, checked.

    That is ``labels``, ``annotations`` (frozen copies), ``when``, ``field`` (a parsed path) and
    ``value``; ``old``/``new`` only exist on changing handlers and are left to their builders.
    ``value=`` needs ``field=``, and is exclusive with ``old=``/``new=``, which need it too.
    ``stacklevel`` locates deprecation warnings: 1 is the caller of this function.
    """
    real_labels = _check_meta_filter("labels", labels, stacklevel=stacklevel + 2)
    real_annotations = _check_meta_filter("annotations", annotations, stacklevel=stacklevel + 2)
    if when is not None and not callable(when):
        raise TypeError(f"when= must be a callable (fn(**kwargs) -> bool), got {when!r}.")
    real_field = parse_field(field)
    if real_field is None and (value is not None or old is not None or new is not None):
        names = [n for n, v in [("value", value), ("old", old), ("new", new)] if v is not None]
        raise TypeError(f"{'=/'.join(names)}= filter(s) need a field= to check.")
    if value is not None and (old is not None or new is not None):
        raise TypeError("Use either value= or old=/new= filters, not both.")
    return {
        "labels": real_labels,
        "annotations": real_annotations,
        "when": when,
        "field": real_field,
        "value": value,
    }


def check_operations(
    operation: str | None,
    operations: Collection[str] | None,
    *,
    stacklevel: int = 1,
) -> frozenset[str] | None:
    """Admission operations: ``None`` (or ``'*'``) means all of them.

    ``stacklevel`` locates deprecation warnings: 1 is the caller of this function.
    """
    if operation is not None:
        warnings.warn(
            "operation= is deprecated; use operations=[...].",
            DeprecationWarning,
            stacklevel=stacklevel + 1,
        )
    if isinstance(operations, str):
        raise TypeError(f"operations= must be a collection of strings: [{operations!r}].")
    collected: set[str] = set()
    if operation is not None:
        collected.add(operation)
    if operations is not None:
        collected.update(operations)
    if "*" in collected or "" in collected:
        return None
    for op in collected:
        if op not in OPERATIONS:
            raise ValueError(
                f"Unknown admission operation {op!r}; use some of {', '.join(sorted(OPERATIONS))}."
            )
    if operations is not None and not collected:
        raise ValueError("operations= cannot be empty; omit it to accept all operations.")
    return frozenset(collected) if collected else None


def build_subhandler(
    fn: Callable[..., Any],
    *,
    parent: BaseHandler,
    id: str | None = None,
    param: Any = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter = None,
    old: ValueFilter = None,
    new: ValueFilter = None,
    flavor: Flavor | None = None,
    stacklevel: int = 1,
) -> ChangingHandler:
    """A sub-handler of a running resource-changing handler, with the id ``parent/child``.

    It reacts to whatever cause its parent runs for, on the parent's resource; it is update-like
    (field changes, ``old=``/``new=``) exactly when its parent is. Unlike top-level handlers, its
    id gets no field suffix (ids are stored on objects; this keeps them Kopf-compatible).
    """
    if not isinstance(parent, ChangingHandler):
        raise TypeError(
            "Sub-handlers are supported only inside resource-changing handlers "
            "(on.create/update/delete/resume/field and their sub-handlers)."
        )
    if not callable(fn):
        raise TypeError(f"A handler must be callable, got {fn!r}.")
    check_common_options(id=id, errors=errors, timeout=timeout, retries=retries, backoff=backoff)
    filters = check_filters(
        labels=labels,
        annotations=annotations,
        when=when,
        field=field,
        value=value,
        old=old,
        new=new,
        stacklevel=stacklevel + 1,
    )
    if (old is not None or new is not None) and not parent.field_needs_change:
        raise TypeError(
            "old=/new= filters are only supported for sub-handlers of update/field handlers."
        )
    return ChangingHandler(
        fn=fn,
        id=generate_id(fn, id=id, prefix=parent.id),
        # Unless told otherwise, a sub-handler runs under the flavor its parent was told to.
        flavor=check_flavor(flavor) if flavor is not None else parent.flavor,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        selector=None,
        **filters,
        old=old,
        new=new,
        reason=None,
        field_needs_change=parent.field_needs_change,
    )
