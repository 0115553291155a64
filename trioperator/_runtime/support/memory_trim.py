"""Handing memory that is free again back to the system, every few minutes (glibc only).

An operator allocates and frees all the time: decoded watch events, API answers, request
bodies. CPython takes its small objects from its own arenas, which it returns once they are
empty. Anything larger comes from the C allocator. glibc's allocator returns only the free
memory at the top of its heap. Chunks freed below a chunk still in use stay in the process,
free but counted in its RSS. In a two-hour soak (``benchmarks/RESULTS-soak.md``) the heap
grew by about 1 MiB per hour this way while the live objects stayed flat. One
``malloc_trim(0)`` in the running operator gave 2.9 MiB back and brought the heap below where
it was after the warm-up.

So the operator calls ``malloc_trim(0)`` every ``settings.process.memory_trim_interval``
seconds. Measured on fragmented heaps, a call took 3 ms where it released 10 MiB and 0.3 ms
after that, and 150 ms where it released 510 MiB of a 770 MiB heap (once; the next call took
30 ms). It runs on the event loop, like a collection of the garbage collector: in a worker
thread it would make the operator's timing depend on a real thread, and under a test's jumping
mock clock the virtual time would race ahead while the thread runs. On a C library without
``malloc_trim`` (musl, macOS) nothing is done. An operator embedded in a host process trims
the host's heap too (the allocator is the process's): a host that minds can set the interval
to None.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

import trio

__all__ = ["libc_trimmer", "trim_memory_forever"]

logger = logging.getLogger("trioperator.memory")


def libc_trimmer() -> Callable[[], int] | None:
    """The C library's ``malloc_trim(0)``, or None where there is none."""
    try:
        libc = ctypes.CDLL(None)  # the symbols the process is already linked with
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def trim_all() -> int:
        return int(trim(0))

    return trim_all


async def trim_memory_forever(
    interval: float | None,
    *,
    trimmer: Callable[[], int] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Trim every ``interval`` seconds, until cancelled; return at once if disabled (None, 0)
    or if the C library cannot trim."""
    trim = trimmer if trimmer is not None else libc_trimmer()
    task_status.started()
    if not interval or interval <= 0 or trim is None:
        return
    while True:
        await trio.sleep(interval)
        trim()
        logger.debug("Free memory was handed back to the system (malloc_trim).")
