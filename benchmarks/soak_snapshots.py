"""Compare the tracemalloc snapshots of a soak (bench_soak.py --tracemalloc-dir DIR).

    python benchmarks/soak_snapshots.py DIR            # the traced total of every snapshot
    python benchmarks/soak_snapshots.py DIR 2 -1       # what grew between two of them

The question it answers: when the operator's RSS grows over a soak, is it Python objects that
stay alive (their total traced size grows, and the lines that allocated them show where), or
memory the allocator keeps after the objects are gone (the traced total stays flat)?
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

IGNORED = [
    tracemalloc.Filter(False, "*tracemalloc*"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
]


def load(path: Path) -> tracemalloc.Snapshot:
    return tracemalloc.Snapshot.load(str(path)).filter_traces(IGNORED)


def traced_mib(snapshot: tracemalloc.Snapshot) -> float:
    return sum(stat.size for stat in snapshot.statistics("filename")) / 2**20


def main(argv: list[str]) -> None:
    paths = sorted(Path(argv[0]).glob("snapshot-*.bin"))
    if not paths:
        raise SystemExit(f"no snapshot-*.bin in {argv[0]}")
    if len(argv) < 3:
        for path in paths:
            print(f"{path.name}: {traced_mib(load(path)):.1f} MiB traced")
        return
    before, after = load(paths[int(argv[1])]), load(paths[int(argv[2])])
    print(f"traced: {traced_mib(before):.1f} -> {traced_mib(after):.1f} MiB")
    for stat in after.compare_to(before, "lineno")[:20]:
        print(stat)


if __name__ == "__main__":
    main(sys.argv[1:])
