"""The open-loop trace of the benchmarks (benchmarks/operators/tracing.py) wraps trioperator's
internals by name: a rename in the package must fail here, not make `--open-trace` quietly
record nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

OPERATORS = Path(__file__).parents[2] / "benchmarks" / "operators"

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import tracing
from trioperator._client import http
from trioperator._client.transport import pool
from trioperator._runtime.objects import mailboxes

tracing.install("trioperator")
wrapped = [
    mailboxes.Mailbox.put,
    mailboxes.Backlog.wait_for_room,
    pool.TransportPool.request,
    http.HTTPSession.request,
]
assert all(hasattr(fn, "__wrapped__") for fn in wrapped), wrapped
mailbox = mailboxes.Mailbox(mailboxes.Backlog(), keep_all=False)
mailbox.put({"type": "ADDED", "object": {"metadata": {"name": "x", "resourceVersion": "7"}}})
assert len(mailbox) == 1  # the event still reaches the mailbox
"""


def test_the_trace_wraps_what_exists_and_records_events(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(OPERATORS)],
        env={**os.environ, "BENCH_TRACE": str(trace)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    events = [line for line in lines if line[0] == "e"]
    assert [line[1:4] for line in events] == [["x", "ADDED", "7"]]
    assert {line[1] for line in lines if line[0] == "gcsum"} == {0, 1, 2}  # written at exit
