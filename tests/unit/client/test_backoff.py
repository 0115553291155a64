"""The backoff arithmetic: steps of a ramp stretched by jitter, a server's Retry-After capped."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
from trioperator._client.backoff import capped_retry_after, jittered, nth_backoff


class Draws:
    def __init__(self, *values: float) -> None:
        self.values = iter(values)

    def random(self) -> float:
        return next(self.values)


@pytest.mark.parametrize(
    ("draw", "jitter", "expected"),
    [
        (0.0, 1.0, 8.0),  # never shorter than the step...
        (0.5, 1.0, 12.0),
        (0.999, 1.0, 15.992),  # ...up to (almost) twice it
        (0.5, 0.25, 9.0),  # a quarter of the step is random: 8 to 10 seconds
        (0.9, 0.0, 8.0),  # no jitter: the step itself
    ],
)
def test_jittered_is_uniform_above_the_step(draw: float, jitter: float, expected: float) -> None:
    assert jittered(8.0, jitter, Draws(draw)) == pytest.approx(expected)


def test_jittered_draws_nothing_when_it_needs_nothing() -> None:
    assert jittered(0.0, 1.0, Draws()) == 0.0
    assert jittered(5.0, 0.0, Draws()) == 5.0
    assert jittered(-1.0, 1.0, Draws()) == 0.0


def test_jittered_sleeps_spread_over_half_a_step_by_default() -> None:
    rng = random.Random(2026)
    sleeps = [jittered(10.0, 0.5, rng) for _ in range(1000)]
    assert all(10.0 <= sleep < 15.0 for sleep in sleeps)  # never sooner than the ramp says
    assert min(sleeps) < 10.5
    assert max(sleeps) > 14.5
    assert 12.0 < sum(sleeps) / len(sleeps) < 13.0


def test_nth_backoff_takes_the_ramp_and_repeats_its_last_step() -> None:
    ramp = (1, 1, 2, 3, 5)
    assert [nth_backoff(ramp, n) for n in range(1, 9)] == [1, 1, 2, 3, 5, 5, 5, 5]
    assert nth_backoff(2.5, 1) == nth_backoff(2.5, 100) == 2.5
    assert nth_backoff([], 3) is None


def test_nth_backoff_of_an_endless_ramp() -> None:
    def doubling() -> Iterator[float]:
        return (2.0**i for i in itertools.count())

    class Endless:
        def __iter__(self) -> Iterator[float]:
            return doubling()

    assert nth_backoff(Endless(), 1) == 1.0
    assert nth_backoff(Endless(), 11) == 1024.0


@pytest.mark.parametrize(
    ("retry_after", "cap", "expected"),
    [(None, 60, None), (5.0, 60, 5.0), (1e9, 60, 60.0), (1e9, 0, 0.0)],
)
def test_capped_retry_after(retry_after: float | None, cap: float, expected: float | None) -> None:
    assert capped_retry_after(retry_after, cap) == expected
