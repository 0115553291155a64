"""The backoff arithmetic: steps of a ramp, full jitter, the cap of a server's Retry-After."""

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
        (0.0, 1.0, 8.0),  # full jitter: from the whole step...
        (0.5, 1.0, 4.0),
        (0.999, 1.0, 0.008),  # ...down to (almost) nothing
        (0.5, 0.25, 7.0),  # a quarter of the step is random: 6 to 8 seconds
        (0.9, 0.0, 8.0),  # no jitter: the step itself
    ],
)
def test_jittered_is_uniform_below_the_step(draw: float, jitter: float, expected: float) -> None:
    assert jittered(8.0, jitter, Draws(draw)) == pytest.approx(expected)


def test_jittered_draws_nothing_when_it_needs_nothing() -> None:
    assert jittered(0.0, 1.0, Draws()) == 0.0
    assert jittered(5.0, 0.0, Draws()) == 5.0
    assert jittered(-1.0, 1.0, Draws()) == 0.0


def test_jittered_sleeps_spread_over_the_step() -> None:
    rng = random.Random(2026)
    sleeps = [jittered(10.0, 1.0, rng) for _ in range(1000)]
    assert all(0 < sleep <= 10.0 for sleep in sleeps)
    assert min(sleeps) < 0.5 and max(sleeps) > 9.5  # noqa: PT018 -- the two ends of one range
    assert 4.5 < sum(sleeps) / len(sleeps) < 5.5


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
