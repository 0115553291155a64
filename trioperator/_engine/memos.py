"""In-memory containers for runtime-only values, shared by handlers of one object or operator."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

_MemoT = TypeVar("_MemoT")


class Memo(dict[Any, Any]):
    """A dict whose keys can also be read and written as attributes.

    ``memo.x = 1`` stores ``memo['x']``; reading a missing attribute raises ``AttributeError``
    (not ``KeyError``), so ``getattr(memo, 'x', default)`` and ``hasattr`` work. Names of dict
    methods (``keys``, ``items``, ...) stay methods when read as attributes: use ``memo['keys']``
    for such keys.
    """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails, so methods and dunders are never shadowed.
        try:
            return self[name]
        except KeyError:
            raise self._no_attribute(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise self._no_attribute(name) from None

    def _no_attribute(self, name: str) -> AttributeError:
        return AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def copy_memo(operator_memo: _MemoT | None) -> _MemoT | Memo:
    """A per-object memo made from the operator's memo.

    The copy is shallow, via ``copy.copy()``: keys are the object's own, but the values are the
    operator's objects (so a lock or a queue put there at startup is shared by every object).
    This is also how custom memo classes (any class, not only ``Memo``) are copied: a class
    whose ``__copy__`` returns ``self`` makes one memo shared by all objects. Without an
    operator memo, each object gets a fresh empty ``Memo``.
    """
    if operator_memo is None:
        return Memo()
    return copy.copy(operator_memo)
