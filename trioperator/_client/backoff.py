"""How long to wait before retrying the API: backoff steps, jitter, and the server's own wish.

Every retry of the client (the attempts of one request, see ``api.py``) and of the watchers (a
listing or a watch that failed, see ``watching.py``) sleeps for a step of a ramp (by default
Kopf's ``error_backoffs``: 1, 1, 2, 3, 5, 8, 13, 21 seconds, a Fibonacci ramp that grows about
1.6 times per step, i.e. exponentially up to its last step), **stretched by jitter**: the sleep
is drawn uniformly from the step up to ``(1 + jitter) * step``, ``jitter`` being
``settings.networking.backoff_jitter`` (0.5 by default: up to half a step longer). Without it,
the many workers and watchers that failed together (an API server restart, a proxy hiccup)
would all come back at the same instants, again and again; drawn independently, they spread
over each step. The ramp stays the lower bound of every sleep: a request is retried for at
least as long as the settings say (Kopf's ramp rides out an API server restart of up to ~54 s,
and so does ours). Jitter that may shorten the sleeps ("full jitter", from 0 up to the step)
halves that on average, and was measured to give up during an API server restart in the chaos
tier.

A server's ``Retry-After`` is untrusted: it is capped (``max_retry_after``) before anything
sleeps on it.

The random source is a ``random.Random`` owned by the API client (``APIClient.rng``), so that
tests make the draws deterministic by giving the client a seeded or scripted one.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from itertools import islice
from typing import Protocol

__all__ = ["RandomSource", "capped_retry_after", "default_random", "jittered", "nth_backoff"]


class RandomSource(Protocol):
    """What the backoffs need of a random generator (``random.Random`` is one)."""

    def random(self) -> float:
        """A float in [0, 1)."""
        ...


def default_random() -> random.Random:
    """A generator of its own: other users of the global one neither disturb nor see its draws."""
    return random.Random()


def jittered(step: float, jitter: float, rng: RandomSource) -> float:
    """A sleep for a backoff ``step``: uniform between ``step`` and ``(1 + jitter) * step``."""
    if step <= 0 or jitter <= 0:
        return max(step, 0.0)
    return step * (1.0 + jitter * rng.random())


def nth_backoff(value: float | Iterable[float], n: int) -> float | None:
    """The ``n``-th step (from 1) of a backoff setting, its last step repeating once it runs out.

    ``None`` if the setting has no step at all (an empty sequence: no retries wanted).
    """
    if isinstance(value, int | float):
        return float(value)
    # Only the last of the first n steps is kept: a ramp may be long (or endless).
    taken = deque(islice(value, max(n, 1)), maxlen=1)
    return float(taken[0]) if taken else None


def capped_retry_after(retry_after: float | None, cap: float) -> float | None:
    """The server's requested delay, never longer than ``cap`` seconds."""
    if retry_after is None:
        return None
    return min(retry_after, cap)
