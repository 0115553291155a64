"""Token buckets: the client-side rate limit of requests, and the budget of their retries.

A bucket holds up to ``burst`` tokens and gains ``rate`` tokens per second; taking a token when
the bucket is empty waits until one has accrued. It is client-go's flow control (``--kube-api-qps``
and ``--kube-api-burst``, a token bucket of golang.org/x/time/rate), kept in the same shape:

* a waiter **reserves** its token at once (the level goes below zero) and sleeps until the
  token it reserved has accrued, so waiters are served in the order they came, each one sleep
  and no polling, and no waiter can be overtaken by a later arrival;
* a waiter that is cancelled gives its reservation back, so the ones behind it are not delayed
  for a request that never went out (they were already given their sleeps: they may come out a
  little later than necessary, never earlier than the rate allows);
* time is trio's (``trio.current_time()``), so a MockClock governs it in tests.

The API client keeps two (see ``api.py``): the rate limit of every request the operator makes
(``settings.networking.qps``/``burst``; off by default), and the retry budget
(``settings.networking.retry_budget``/``retry_burst``), which only the retries of failed
requests draw from.
"""

from __future__ import annotations

import math

import trio

__all__ = ["TokenBucket"]


class TokenBucket:
    """Up to ``burst`` tokens, refilled at ``rate`` tokens per second; starts full."""

    __slots__ = ("_level", "_updated", "burst", "rate")

    def __init__(self, rate: float, burst: int) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"A token bucket needs a positive, finite rate; got {rate!r}.")
        if burst < 1:
            raise ValueError(f"A token bucket needs a burst of 1 or more; got {burst!r}.")
        self.rate = float(rate)
        self.burst = burst
        self._level = float(burst)
        self._updated = trio.current_time()

    def _refill(self, now: float) -> float:
        level = min(float(self.burst), self._level + (now - self._updated) * self.rate)
        self._level = level
        self._updated = now
        return level

    @property
    def available(self) -> float:
        """Tokens in the bucket now (negative: reserved by waiters ahead)."""
        return self._refill(trio.current_time())

    def delay(self) -> float:
        """How long a token taken now would wait (0: one is there), without taking it."""
        level = self._refill(trio.current_time())
        return 0.0 if level >= 1 else (1 - level) / self.rate

    async def take(self) -> float:
        """Take one token, waiting for it if needed; return how long it waited (seconds).

        Without a wait, this does not checkpoint: the caller's request is its next one.
        """
        now = trio.current_time()
        level = self._refill(now) - 1
        self._level = level
        if level >= 0:
            return 0.0
        wait = -level / self.rate
        try:
            await trio.sleep(wait)
        except BaseException:
            self._level += 1  # never went out: the ones behind need not wait for it
            raise
        return wait
