"""Lifecycles: which of the pending handlers run in this processing cycle, and in what order.

A lifecycle gets the handlers still to run (done ones excluded) in their declaration order,
plus ``state`` (per-handler progress by handler id) and possibly more keyword arguments it
should ignore. It returns the handlers to run now. Whatever it leaves out runs in a later
cycle: each cycle's patch provokes a new watch event, and thus a new cycle.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from trioperator._engine.ids import HandlerId
from trioperator._util.lognames import framework_logger

logger = framework_logger("kopf._core.actions.lifecycles", __name__)


class HandlerLike(Protocol):
    """What a lifecycle needs from a handler: its id (to look up its state)."""

    @property
    def id(self) -> HandlerId: ...


class HandlerStateLike(Protocol):
    """What a lifecycle needs from a handler's state: how often it was retried."""

    @property
    def retries(self) -> int | None: ...


_H = TypeVar("_H", bound=HandlerLike)

LifeCycleFn = Callable[..., Sequence[Any]]
"""``fn(handlers, *, state, **kwargs) -> handlers to run now``."""


def all_at_once(handlers: Sequence[_H], **_: Any) -> Sequence[_H]:
    """Run all pending handlers in this cycle, in declaration order."""
    return list(handlers)


def one_by_one(handlers: Sequence[_H], **_: Any) -> Sequence[_H]:
    """Run one handler per cycle, in declaration order (a failing one blocks the rest)."""
    return list(handlers[:1])


def randomized(handlers: Sequence[_H], **_: Any) -> Sequence[_H]:
    """Run one randomly chosen handler per cycle."""
    return [random.choice(handlers)] if handlers else []


def shuffled(handlers: Sequence[_H], **_: Any) -> Sequence[_H]:
    """Run all pending handlers in this cycle, in random order."""
    return random.sample(list(handlers), k=len(handlers))


def asap(
    handlers: Sequence[_H], *, state: Mapping[HandlerId, HandlerStateLike], **_: Any
) -> Sequence[_H]:
    """Run one handler per cycle: the one retried least so far (ties: declaration order).

    A failing handler thus does not block the others: after its retry, every other pending
    handler gets its turn before it is tried again. Handlers without a state count as 0.
    """

    def retries(handler: _H) -> int:
        handler_state = state.get(handler.id)
        return (handler_state.retries or 0) if handler_state is not None else 0

    # sorted() is stable, so equal retries keep the declaration order.
    return sorted(handlers, key=retries)[:1]


_default_lifecycle: LifeCycleFn = asap
_default_is_explicit = False


def get_default_lifecycle() -> LifeCycleFn:
    """The lifecycle used when an operator is started without one (``asap`` unless set)."""
    return _default_lifecycle


def set_default_lifecycle(lifecycle: LifeCycleFn | None) -> None:
    """Set the default lifecycle for operators started later; ``None`` restores ``asap``."""
    global _default_lifecycle, _default_is_explicit
    if _default_is_explicit and lifecycle is not _default_lifecycle:
        logger.warning(
            "The default lifecycle is already set to %r; overriding it with %r.",
            _default_lifecycle,
            lifecycle,
        )
    _default_lifecycle = lifecycle if lifecycle is not None else asap
    _default_is_explicit = lifecycle is not None
