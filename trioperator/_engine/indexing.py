"""In-memory indices: what ``@index`` handlers return, kept per object and merged by key.

An ``Index`` is a read-only mapping of keys to ``Store``s; a ``Store`` is a read-only collection
of the values that some objects put under that key. Handlers get the indices as kwargs named
after the indexing handlers' ids and may keep references to them: an index object lives as long
as its operator and is updated in place.

Each object's contribution is tracked by an object key (an opaque hashable given by the
runtime), with a reverse index from objects to their keys, so that re-indexing or dropping one
object touches only its own keys, not the whole index. Stores and keys that become empty are
removed: an index never shows an empty collection.

How a handler's result becomes index content (:meth:`Indexers.replace`):

- a ``dict`` (exactly ``dict``, not any mapping) is merged key by key; the keys the object no
  longer returns lose its values;
- anything else is stored under the key ``None``;
- ``None`` means "nothing to say": the object's existing values stay as they are.

Only the runtime writes, through the underscore methods and ``Indexers``; everything handlers
can reach is read-only.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Index", "Indexers", "Store"]

K = TypeVar("K")
V = TypeVar("V")

ObjectKey = Hashable
"""Identifies one object (the runtime uses its uid); never shown to handlers."""


class Store(Collection[V], Generic[V]):
    """The values of all objects that an index has under one key (read-only for handlers)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[ObjectKey, V] = {}

    def __repr__(self) -> str:
        return repr(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[V]:
        return iter(self._items.values())

    def __contains__(self, value: object) -> bool:
        return any(item == value for item in self._items.values())

    def _replace(self, obj: ObjectKey, value: V) -> None:
        self._items[obj] = value

    def _discard(self, obj: ObjectKey) -> None:
        self._items.pop(obj, None)


class Index(Mapping[K, Store[V]], Generic[K, V]):
    """An index: keys to the collections of values the indexed objects put under them."""

    __slots__ = ("_items", "_reverse")

    def __init__(self) -> None:
        self._items: dict[K, Store[V]] = {}
        self._reverse: dict[ObjectKey, set[K]] = {}

    def __repr__(self) -> str:
        return repr(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __getitem__(self, key: K) -> Store[V]:
        return self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def _replace(self, obj: ObjectKey, values: Mapping[K, V]) -> None:
        """Make ``values`` the object's whole contribution (keys it no longer has are dropped)."""
        keys = self._reverse.setdefault(obj, set())
        for key, value in values.items():
            store = self._items.get(key)
            if store is None:
                store = self._items[key] = Store()
            store._replace(obj, value)
            keys.add(key)
        self._discard(obj, [key for key in keys if key not in values])

    def _discard(self, obj: ObjectKey, keys: Iterable[K] | None = None) -> None:
        """Drop the object's values: under the given keys, or everywhere."""
        known = self._reverse.get(obj)
        if known is None:
            return
        for key in list(known if keys is None else keys):
            store = self._items.get(key)
            if store is not None:
                store._discard(obj)
                if not store:
                    del self._items[key]
            known.discard(key)
        if not known:
            del self._reverse[obj]


class _IndicesView(Mapping[str, Index[Any, Any]]):
    """The operator's indices by handler id, read-only (what causes spread into kwargs)."""

    __slots__ = ("_indices",)

    def __init__(self, indices: dict[str, Index[Any, Any]]) -> None:
        self._indices = indices

    def __repr__(self) -> str:
        return repr(self._indices)

    def __len__(self) -> int:
        return len(self._indices)

    def __iter__(self) -> Iterator[str]:
        return iter(self._indices)

    def __getitem__(self, name: str) -> Index[Any, Any]:
        return self._indices[name]

    def __contains__(self, name: object) -> bool:
        return name in self._indices


class Indexers:
    """All indices of one operator, by indexing handler id, and the only way to write them."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._indices: dict[str, Index[Any, Any]] = {}
        self.indices: Mapping[str, Index[Any, Any]] = _IndicesView(self._indices)
        """The read-only view handed to handlers (it sees indices added later, too)."""
        self.ensure(ids)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._indices!r}>"

    def ensure(self, ids: Iterable[str]) -> None:
        """Create the (empty) indices of these handler ids if they do not exist yet.

        Indices exist from the start, even before anything is indexed: handlers need no checks.
        """
        for name in ids:
            if name not in self._indices:
                self._indices[str(name)] = Index()

    def replace(self, name: str, obj: ObjectKey, result: Any) -> None:
        """Put what one indexing handler returned for one object into its index."""
        if result is None:
            return  # no opinion: keep what the object had
        self.ensure([name])
        values = result if type(result) is dict else {None: result}
        self._indices[name]._replace(obj, values)

    def discard(self, name: str, obj: ObjectKey) -> None:
        """Drop one object's values from one index (e.g. its filters stopped matching)."""
        index = self._indices.get(name)
        if index is not None:
            index._discard(obj)

    def discard_all(self, obj: ObjectKey) -> None:
        """Drop one object's values from every index (e.g. it is deleted)."""
        for index in self._indices.values():
            index._discard(obj)
