"""The operator's wall clock: the one source of every wall-clock timestamp it produces.

It is the real time at trio's time zero plus trio's clock, so that a ``MockClock`` governs
the timestamps in tests as it governs the delays (the real wall clock does not move with a mock
clock). The base is fixed once per ``trio.run``: every operator of one run agrees on the time
(e.g. an operator restarted in the same process reads the delays its predecessor stored).
Outside of ``trio.run`` (e.g. a CLI command before it starts trio), it is the real wall clock.
"""

from __future__ import annotations

import datetime

import trio

__all__ = ["now", "run_basetime"]

_basetime: trio.lowlevel.RunVar[datetime.datetime] = trio.lowlevel.RunVar("trioperator.basetime")


def run_basetime() -> datetime.datetime:
    """The wall-clock time at trio's time zero in the current ``trio.run``."""
    try:
        return _basetime.get()
    except LookupError:
        real = datetime.datetime.now(datetime.UTC)
        basetime = real - datetime.timedelta(seconds=trio.current_time())
        _basetime.set(basetime)
        return basetime


def now() -> datetime.datetime:
    """The current wall-clock time (UTC, aware)."""
    try:
        seconds = trio.current_time()
    except RuntimeError:  # not in trio.run: nothing else to agree with
        return datetime.datetime.now(datetime.UTC)
    return run_basetime() + datetime.timedelta(seconds=seconds)
