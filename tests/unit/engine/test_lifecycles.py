from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pytest
from trioperator._engine import lifecycles
from trioperator._engine.ids import HandlerId
from trioperator._engine.lifecycles import (
    all_at_once,
    asap,
    get_default_lifecycle,
    one_by_one,
    randomized,
    set_default_lifecycle,
    shuffled,
)


@dataclasses.dataclass(frozen=True)
class Handler:
    id: HandlerId


@dataclasses.dataclass(frozen=True)
class State:
    retries: int | None


H1, H2, H3 = Handler(HandlerId("fn1")), Handler(HandlerId("fn2")), Handler(HandlerId("fn3"))
HANDLERS = [H1, H2, H3]


def _state(*retries: int | None) -> dict[HandlerId, State]:
    return {h.id: State(r) for h, r in zip(HANDLERS, retries, strict=False)}


@pytest.fixture(autouse=True)
def _restore_default_lifecycle() -> Iterator[None]:
    saved = (lifecycles._default_lifecycle, lifecycles._default_is_explicit)
    yield
    lifecycles._default_lifecycle, lifecycles._default_is_explicit = saved


@pytest.mark.parametrize("fn", [all_at_once, one_by_one, randomized, shuffled, asap])
def test_no_handlers_means_nothing_to_run(fn: lifecycles.LifeCycleFn) -> None:
    assert list(fn([], state={})) == []


@pytest.mark.parametrize("fn", [all_at_once, one_by_one, randomized, shuffled, asap])
def test_extra_kwargs_are_ignored(fn: lifecycles.LifeCycleFn) -> None:
    assert fn(HANDLERS, state=_state(0, 0, 0), body={}, future_kwarg=1)


def test_all_at_once() -> None:
    assert list(all_at_once(HANDLERS, state=_state(5, 0, 1))) == HANDLERS


def test_one_by_one() -> None:
    assert list(one_by_one(HANDLERS, state=_state(5, 0, 1))) == [H1]


def test_randomized_picks_one() -> None:
    picked = {randomized(HANDLERS, state={})[0] for _ in range(200)}
    assert picked == set(HANDLERS)
    assert all(len(randomized(HANDLERS)) == 1 for _ in range(10))


def test_shuffled_runs_all_in_some_order() -> None:
    orders = {tuple(shuffled(HANDLERS)) for _ in range(200)}
    assert all(sorted(order, key=HANDLERS.index) == HANDLERS for order in orders)
    assert len(orders) > 1


def test_lifecycles_do_not_modify_the_input() -> None:
    handlers = list(HANDLERS)
    for fn in (all_at_once, one_by_one, randomized, shuffled, asap):
        fn(handlers, state=_state(2, 1, 0))
    assert handlers == HANDLERS


@pytest.mark.parametrize(
    ("retries", "expected"),
    [
        ((0, 0, 0), H1),  # ties: declaration order
        ((1, 0, 0), H2),
        ((1, 1, 0), H3),
        ((2, 1, 1), H2),
        ((0, 5, 0), H1),
        ((3, 2, 1), H3),
        ((None, 1, 1), H1),  # None counts as 0
        ((1, None, 0), H2),
    ],
)
def test_asap_picks_the_least_retried(retries: tuple[int | None, ...], expected: Handler) -> None:
    assert list(asap(HANDLERS, state=_state(*retries))) == [expected]


def test_asap_counts_handlers_without_state_as_fresh() -> None:
    assert list(asap(HANDLERS, state=_state(1))) == [H2]
    assert list(asap(HANDLERS, state={})) == [H1]


def test_asap_cycles_through_failing_handlers() -> None:
    # Simulate cycles where each run handler fails once more (retries += 1).
    retries = {h.id: 0 for h in HANDLERS}
    order = []
    for _ in range(6):
        (picked,) = asap(HANDLERS, state={k: State(v) for k, v in retries.items()})
        order.append(picked)
        retries[picked.id] += 1
    assert order == [H1, H2, H3, H1, H2, H3]


def test_the_default_lifecycle_is_asap() -> None:
    set_default_lifecycle(None)
    assert get_default_lifecycle() is asap


def test_setting_the_default_lifecycle(caplog: pytest.LogCaptureFixture) -> None:
    set_default_lifecycle(None)
    with caplog.at_level(logging.WARNING):
        set_default_lifecycle(one_by_one)
    assert get_default_lifecycle() is one_by_one
    assert not caplog.records  # replacing the built-in default is not worth a warning

    with caplog.at_level(logging.WARNING):
        set_default_lifecycle(all_at_once)
    assert get_default_lifecycle() is all_at_once
    assert "already set" in caplog.text

    set_default_lifecycle(None)
    assert get_default_lifecycle() is asap
