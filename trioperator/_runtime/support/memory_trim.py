"""Handing memory that is free again back to the system, every few minutes (glibc only).

An operator allocates and frees all the time: decoded watch events, API answers, request
bodies. CPython takes its small objects from its own arenas, which it returns once they are
empty. Anything larger comes from the C allocator. glibc's allocator returns only the free
memory at the top of its heap. Chunks freed below a chunk still in use stay in the process,
free but counted in its RSS. In an hour-long soak (``benchmarks/RESULTS-soak.md``) the heap
grew by about 1 MiB per hour this way while the live objects stayed flat. One
``malloc_trim(0)`` in the running operator gave 2.9 MiB back and brought the heap below where
it was after the warm-up.

So the operator calls ``malloc_trim(0)`` every ``settings.process.memory_trim_interval``
seconds. Measured on fragmented heaps, a call took 3 ms where it released 10 MiB and 0.3 ms
after that, and 150 ms where it released 510 MiB of a 770 MiB heap. It runs in a worker thread,
so the event loop never waits for it. On a C library without ``malloc_trim`` (musl, macOS)
nothing is done.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

import trio

__all__ = ["in_worker_thread", "libc_trimmer", "trim_memory_forever"]

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


async def in_worker_thread(trim: Callable[[], int]) -> int:
    """Where a trim runs: in a worker thread. The allocator holds its lock while it walks the
    heap, and the walk grows with the heap (an operator with a hundred thousand objects)."""
    return await trio.to_thread.run_sync(trim)


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
        await in_worker_thread(trim)
        logger.debug("Free memory was handed back to the system (malloc_trim).")
