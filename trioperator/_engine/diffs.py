"""Differences between two states of an object, as handlers see them in the ``diff`` kwarg.

A diff is a sequence of ``(operation, field, old, new)`` items. Dicts are walked key by key;
anything else (lists, scalars, a dict replaced by a scalar) is compared as a whole value.
Kubernetes does not distinguish "absent" from ``null``, so neither does the diff: a key that
appears is an ``add`` with ``old=None``, a key that disappears is a ``remove`` with ``new=None``,
and a key whose value goes from absent to ``None`` is no change at all.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, overload

FieldPath = tuple[str, ...]
"""A field as a tuple of keys from the root, e.g. ``('spec', 'size')``; ``()`` is the root."""

FieldSpec = str | Sequence[str] | None
"""A field as users write it: ``'spec.size'``, ``['spec', 'size']``, ``('spec', 'size')``."""


class DiffOperation(enum.StrEnum):
    """What happened at a field's path in one item of a ``Diff``."""

    ADD = "add"
    CHANGE = "change"
    REMOVE = "remove"

    def __repr__(self) -> str:
        # Diffs are logged; plain strings read better than <DiffOperation.ADD: 'add'>.
        return repr(self.value)


class DiffItem(NamedTuple):
    """One change; unpacks as ``op, field, old, new``."""

    operation: DiffOperation
    field: FieldPath
    old: Any
    new: Any

    def __repr__(self) -> str:
        return repr(tuple(self))

    @property
    def op(self) -> DiffOperation:
        return self.operation


class Diff(Sequence[DiffItem]):
    """An immutable sequence of diff items.

    It equals any list/tuple of 4-tuples with the same content, so tests and handlers can
    compare it with literals such as ``[('add', ('spec', 'x'), None, 1)]``.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[DiffItem | tuple[Any, Any, Any, Any]] = (), /) -> None:
        self._items: tuple[DiffItem, ...] = tuple(
            _as_item(op, field, old, new) for op, field, old, new in items
        )

    def __repr__(self) -> str:
        return repr(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[DiffItem]:
        return iter(self._items)

    @overload
    def __getitem__(self, index: int) -> DiffItem: ...

    @overload
    def __getitem__(self, index: slice) -> Diff: ...

    def __getitem__(self, index: int | slice) -> DiffItem | Diff:
        if isinstance(index, slice):
            return Diff(self._items[index])
        return self._items[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Diff):
            return self._items == other._items
        if isinstance(other, list | tuple):
            try:
                return [tuple(item) for item in self._items] == [tuple(item) for item in other]
            except TypeError:  # an element that is not iterable: not a diff-like sequence
                return False
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # the old/new values may be unhashable dicts


EMPTY = Diff()


def _as_item(op: Any, field: Any, old: Any, new: Any) -> DiffItem:
    return DiffItem(DiffOperation(op), tuple(field), old, new)


def parse_field(field: FieldSpec) -> FieldPath:
    """Turn ``'spec.size'``, a list or a tuple of keys into a tuple path.

    ``None`` and ``''`` mean the root (an empty path).
    """
    if field is None:
        return ()
    if isinstance(field, str):
        return tuple(field.split(".")) if field else ()
    if isinstance(field, list | tuple):
        return tuple(str(key) for key in field)
    raise ValueError(f"A field must be a dotted str, a list or a tuple of keys; got {field!r}.")


def resolve(d: Any, field: FieldSpec, default: Any = None) -> Any:
    """The value at a dotted or tuple path, or ``default`` if the path cannot be walked.

    A missing key, a ``None`` on the way, or a non-mapping on the way all yield ``default``:
    the caller asks "what is there", and none of those has anything there.
    """
    value = d
    for key in parse_field(field):
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def diff_iter(a: Any, b: Any, *, path: FieldPath = ()) -> Iterator[DiffItem]:
    """Yield the differences from ``a`` to ``b``, with fields prefixed by ``path``.

    Per level of a dict, the order is: added keys (in ``b``'s order), removed keys (in ``a``'s
    order), then changes under the shared keys (in ``a``'s order).
    """
    if a == b:  # also covers None vs None
        return
    if a is None:
        yield DiffItem(DiffOperation.ADD, path, a, b)
    elif b is None:
        yield DiffItem(DiffOperation.REMOVE, path, a, b)
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in b:
            if key not in a:
                yield from diff_iter(None, b[key], path=(*path, key))
        for key in a:
            if key not in b:
                yield from diff_iter(a[key], None, path=(*path, key))
        for key in a:
            if key in b:
                yield from diff_iter(a[key], b[key], path=(*path, key))
    else:
        yield DiffItem(DiffOperation.CHANGE, path, a, b)


def diff(a: Any, b: Any, *, path: FieldPath = ()) -> Diff:
    """The differences from ``a`` to ``b`` (see the module docstring for the semantics)."""
    return Diff(diff_iter(a, b, path=tuple(path)))


def reduce_iter(d: Diff, field: FieldSpec) -> Iterator[DiffItem]:
    """Yield the items of ``d`` as seen from ``field`` (see :func:`reduce`)."""
    path = parse_field(field)
    depth = len(path)
    for op, item_field, old, new in d:
        if item_field[:depth] == path:
            # The change is at or below the field: re-root it at the field.
            yield DiffItem(op, item_field[depth:], old, new)
        elif path[: len(item_field)] == item_field:
            # The change is above the field (e.g. the whole ``spec`` was added while we look
            # at ``spec.size``): dig the field out of both sides and compare those values.
            tail = path[len(item_field) :]
            yield from diff_iter(resolve(old, tail), resolve(new, tail))


def reduce(d: Diff, field: FieldSpec) -> Diff:
    """The diff as a handler of ``field`` sees it: fields relative to it, unrelated ones gone.

    An empty field (``None``, ``''``, ``()``) returns the same items.
    """
    return Diff(reduce_iter(d, field))
