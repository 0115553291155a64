"""Which objects a handler cares about: metadata, field, change and callback filters.

Every filter of one handler must pass (AND). The checks come in four flavours, usable everywhere a
value is expected (``labels={...}``, ``annotations={...}``, ``value=``, ``old=``, ``new=``):

* a literal value, compared with ``==``;
* the markers ``PRESENT`` / ``ABSENT``;
* a per-value callback ``fn(value, /, **kwargs) -> bool`` that gets ``None`` for absent values;
* and, for ``when=``, a whole-object callback ``fn(**kwargs) -> bool``.

``match()`` is the pure function the runtime calls per handler and event; ``prematch()`` is the
same without the change semantics of update handlers (used to decide about finalizers).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, TypeAlias

from trioperator._client.resources import Resource
from trioperator._engine.selectors import Selector

__all__ = [
    "ABSENT",
    "PRESENT",
    "FieldPath",
    "FieldSpec",
    "FilteredHandler",
    "KwargsSource",
    "MetaFilter",
    "MetaFilterFn",
    "MetaFilterToken",
    "MetaFilterValue",
    "ValueFilter",
    "WhenFilterFn",
    "all_",
    "any_",
    "match",
    "none_",
    "not_",
    "parse_field",
    "prematch",
    "resolve_field",
]


class MetaFilterToken(enum.Enum):
    """The presence markers. Enum members are process-wide singletons, safe to compare by ``is``."""

    PRESENT = "PRESENT"
    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__


PRESENT: Final = MetaFilterToken.PRESENT
"""The label/annotation/field must exist (with any value, even an empty string)."""

ABSENT: Final = MetaFilterToken.ABSENT
"""The label/annotation/field must not exist."""

MetaFilterFn: TypeAlias = Callable[..., bool]
"""A per-value callback: ``fn(value, /, **kwargs) -> bool``; ``value`` is ``None`` if absent."""

WhenFilterFn: TypeAlias = Callable[..., bool]
"""A whole-object callback: ``fn(**kwargs) -> bool`` with the handler's own kwargs."""

MetaFilterValue: TypeAlias = str | MetaFilterToken | MetaFilterFn | None
"""One entry of ``labels=``/``annotations=``. ``None`` is a deprecated spelling of ``PRESENT``."""

MetaFilter: TypeAlias = Mapping[str, MetaFilterValue]
"""``labels=``/``annotations=``: keys are label/annotation names."""

ValueFilter: TypeAlias = Any
"""``value=``/``old=``/``new=``: a literal, ``PRESENT``/``ABSENT``, or a per-value callback."""

FieldPath: TypeAlias = tuple[str, ...]
FieldSpec: TypeAlias = str | FieldPath | list[str]

KwargsSource: TypeAlias = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
"""The kwargs for callbacks, or a factory for them: it is called at most once, and only if some
callback actually needs them (most handlers have no callbacks at all)."""


class FilteredHandler(Protocol):
    """The filters of a resource handler, as matching reads them.

    The handlers (``trioperator._engine.handlers``) are built with this module's vocabulary,
    so it knows them by this protocol only. Update-like handlers also have ``old``, ``new`` and
    ``field_needs_change``: those are looked up by name.
    """

    @property
    def selector(self) -> Selector | None: ...
    @property
    def labels(self) -> MetaFilter | None: ...
    @property
    def annotations(self) -> MetaFilter | None: ...
    @property
    def when(self) -> WhenFilterFn | None: ...
    @property
    def field(self) -> FieldPath | None: ...
    @property
    def value(self) -> ValueFilter: ...


class _Missing(enum.Enum):
    """A value that is not in the object. Distinct from ``None``, which Kubernetes never stores."""

    MISSING = enum.auto()


_MISSING: Final = _Missing.MISSING


# ------------------------------------------------------------------------------------- fields


def parse_field(field: FieldSpec | None) -> FieldPath | None:
    """Parse ``'spec.x'``, ``['spec', 'x']``, ``('spec', 'x')`` into ``('spec', 'x')``.

    ``None`` and empty specs give ``None`` (no field).
    """
    if field is None:
        return None
    if isinstance(field, str):
        parts: FieldPath = tuple(field.split(".")) if field else ()
    elif isinstance(field, (tuple, list)):
        parts = tuple(field)
    else:
        raise TypeError(f"A field must be a dotted string or a sequence of keys, not {field!r}.")
    if not all(isinstance(part, str) for part in parts):
        raise TypeError(f"All keys of a field must be strings: {field!r}.")
    if any(part == "" for part in parts):
        raise ValueError(f"A field cannot have empty keys: {field!r}.")
    return parts or None


def resolve_field(obj: Any, path: FieldPath) -> Any:
    """The value at ``path`` inside nested mappings, or ``None`` if it is not there."""
    value = _resolve(obj, path)
    return None if value is _MISSING else value


def _resolve(obj: Any, path: FieldPath) -> Any:
    value = obj
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _metadata_mapping(body: Any, key: str) -> Mapping[str, Any]:
    value = _resolve(body, ("metadata", key))
    return value if isinstance(value, Mapping) else {}


# ---------------------------------------------------------------------------------- callbacks


class _Kwargs:
    """Builds the callbacks' kwargs on first use and shares them between all filters."""

    __slots__ = ("_cached", "_source")

    def __init__(self, source: KwargsSource) -> None:
        self._source = source
        self._cached: Mapping[str, Any] | None = None

    def get(self) -> Mapping[str, Any]:
        if self._cached is None:
            source = self._source
            self._cached = source() if callable(source) else source
        return self._cached


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        # Filters are evaluated synchronously in the middle of event routing; an un-awaited
        # coroutine would silently count as "true", so refuse loudly instead.
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError(f"Filter callbacks must be synchronous functions; {fn!r} is not.")
    return bool(result)


def _collect(fns: Iterable[Callable[..., Any]], helper: str) -> tuple[Callable[..., Any], ...]:
    if callable(fns):
        raise TypeError(f"{helper}() expects a collection of callables, e.g. {helper}([fn1, fn2]).")
    collected = tuple(fns)
    for fn in collected:
        if not callable(fn):
            raise TypeError(f"{helper}() got a non-callable item: {fn!r}.")
    return collected


def not_(fn: Callable[..., Any]) -> Callable[..., bool]:
    """A callback that passes when ``fn`` does not (works for per-value and ``when=`` filters)."""
    if not callable(fn):
        raise TypeError(f"not_() expects a callable, got {fn!r}.")

    def not_fn(*args: Any, **kwargs: Any) -> bool:
        return not _call(fn, *args, **kwargs)

    return not_fn


def all_(fns: Iterable[Callable[..., Any]]) -> Callable[..., bool]:
    """A callback that passes when every one of ``fns`` passes (stops at the first failure)."""
    collected = _collect(fns, "all_")

    def all_fn(*args: Any, **kwargs: Any) -> bool:
        return all(_call(fn, *args, **kwargs) for fn in collected)

    return all_fn


def any_(fns: Iterable[Callable[..., Any]]) -> Callable[..., bool]:
    """A callback that passes when at least one of ``fns`` passes (stops at the first success)."""
    collected = _collect(fns, "any_")

    def any_fn(*args: Any, **kwargs: Any) -> bool:
        return any(_call(fn, *args, **kwargs) for fn in collected)

    return any_fn


def none_(fns: Iterable[Callable[..., Any]]) -> Callable[..., bool]:
    """A callback that passes when none of ``fns`` passes."""
    collected = _collect(fns, "none_")

    def none_fn(*args: Any, **kwargs: Any) -> bool:
        return not any(_call(fn, *args, **kwargs) for fn in collected)

    return none_fn


# ----------------------------------------------------------------------------------- matching


def _check_value(criterion: Any, actual: Any, kwargs: _Kwargs) -> bool:
    """One value against one criterion; ``actual`` may be ``_MISSING``."""
    if criterion is None or criterion is PRESENT:
        return actual is not _MISSING
    if criterion is ABSENT:
        return actual is _MISSING
    if callable(criterion):
        return _call(criterion, None if actual is _MISSING else actual, **kwargs.get())
    return actual is not _MISSING and bool(actual == criterion)


def _matches_metadata(criteria: MetaFilter, content: Mapping[str, Any], kwargs: _Kwargs) -> bool:
    for key, criterion in criteria.items():
        actual = content.get(key, _MISSING)
        if not _check_value(criterion, actual, kwargs):
            return False
    return True


def _tracks_changes(handler: FilteredHandler) -> bool:
    """Update-like handlers (``on.update``, ``on.field`` and their sub-handlers)."""
    return bool(getattr(handler, "field_needs_change", False))


def _matches_field(
    handler: FilteredHandler,
    *,
    body: Any,
    old: Any,
    new: Any,
    kwargs: _Kwargs,
    changing: bool,
) -> bool:
    path = handler.field
    if path is None:
        return True

    if changing and _tracks_changes(handler):
        # Update handlers live between two equally valid states, so value= accepts either
        # side of the transition ("new" first, so that a passing "new" spares the "old" callback).
        old_criterion = getattr(handler, "old", None)
        new_criterion = getattr(handler, "new", None)
        old_value = _resolve(old, path)
        new_value = _resolve(new, path)
        checks_value = handler.value is not None or (
            old_criterion is None and new_criterion is None
        )
        values = (new_value, old_value)
        if checks_value and not any(_check_value(handler.value, v, kwargs) for v in values):
            return False
        # Only an actual change counts: a different value, or the field appearing/disappearing.
        if old_value is _MISSING and new_value is _MISSING:
            return False
        if old_value is not _MISSING and new_value is not _MISSING and old_value == new_value:
            return False
        if old_criterion is not None and not _check_value(old_criterion, old_value, kwargs):
            return False
        return new_criterion is None or _check_value(new_criterion, new_value, kwargs)

    # All other handlers (and finalizer decisions) see only the current state of the object.
    return _check_value(handler.value, _resolve(body, path), kwargs)


def _match(
    handler: FilteredHandler,
    *,
    body: Any,
    old: Any,
    new: Any,
    kwargs: KwargsSource,
    resource: Resource | None,
    changing: bool,
) -> bool:
    selector = handler.selector
    if resource is not None and selector is not None and not selector.check(resource):
        return False
    lazy = _Kwargs(kwargs)
    for criteria, key in [(handler.labels, "labels"), (handler.annotations, "annotations")]:
        if criteria and not _matches_metadata(criteria, _metadata_mapping(body, key), lazy):
            return False
    if not _matches_field(handler, body=body, old=old, new=new, kwargs=lazy, changing=changing):
        return False
    # The whole-object callback goes last: it is the most expensive and the least predictable.
    return handler.when is None or _call(handler.when, **lazy.get())


def match(
    handler: FilteredHandler,
    *,
    body: Any,
    kwargs: KwargsSource,
    old: Any = None,
    new: Any = None,
    diff: Any = None,
    resource: Resource | None = None,
) -> bool:
    """Whether a resource handler should run for this object in this cycle.

    ``body`` is the current object (a ``Body`` or a raw dict). For resource-changing handlers
    ``old``/``new`` are the whole-object old and new (essential) states of the detected cause,
    ``None`` where a state does not exist (``old`` on creation); update-like handlers
    (``on.update``/``on.field``) check ``field=``/``value=``/``old=``/``new=`` against them and
    require the field to actually change. All other handlers check the ``body`` only. ``diff`` is
    accepted for symmetry with the handler kwargs; the change is judged from ``old``/``new``.
    ``kwargs`` (or a factory of them) feed the callbacks. If ``resource`` is given, the handler's
    selector is checked too.
    """
    del diff  # see the docstring
    changing = hasattr(handler, "field_needs_change")
    return _match(
        handler,
        body=body,
        old=old,
        new=new,
        kwargs=kwargs,
        resource=resource,
        changing=changing,
    )


def prematch(
    handler: FilteredHandler,
    *,
    body: Any,
    kwargs: KwargsSource,
    resource: Resource | None = None,
) -> bool:
    """Whether the object is in the handler's scope by its current state alone (no change checks).

    Used where there is no cause yet, e.g. to decide whether the object needs our finalizer.
    """
    return _match(
        handler,
        body=body,
        old=None,
        new=None,
        kwargs=kwargs,
        resource=resource,
        changing=False,
    )
