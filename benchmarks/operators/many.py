"""The operator of the 100k benchmark (benchmarks/bench_100k.py): one creation handler.

The same source runs under both frameworks (``BENCH_FRAMEWORK`` picks the import), against the
same objects one after the other. So that each framework finds every object never handled, each
keeps its progress and diff-base in annotations of its own prefix (``BENCH_PREFIX``) instead of
the default ones (and not in ``status.kopf``): what one framework wrote means nothing to the
other. The handler's result goes to ``status.create_fn`` with the framework's name.

The handler counts its runs and writes them to ``BENCH_STATE_FILE`` (JSON, replaced atomically)
every ``BENCH_REPORT_EVERY`` runs, at every run from the ``BENCH_EXPECTED``-th on, and
otherwise at a run a second or more after the last report: the harness follows the take-over
without listing 100,000 objects.
"""

import json
import os
import time

FRAMEWORK = os.environ.get("BENCH_FRAMEWORK", "trioperator")
PREFIX = os.environ.get("BENCH_PREFIX", "")
STATE_FILE = os.environ.get("BENCH_STATE_FILE", "")
EVERY = max(1, int(os.environ.get("BENCH_REPORT_EVERY", "1000")))
EXPECTED = int(os.environ.get("BENCH_EXPECTED", "0"))

if FRAMEWORK == "kopf":
    import kopf
else:
    import trioperator as kopf

counts = {"handled": 0, "first_at": None, "last_at": None}
reported = {"at": 0.0}


def report(now):
    if not STATE_FILE:
        return
    reported["at"] = now
    temporary = f"{STATE_FILE}.tmp"
    with open(temporary, "w") as file:
        json.dump(dict(counts, at=now), file)  # CLOCK_MONOTONIC: comparable with the harness's
    os.replace(temporary, STATE_FILE)


@kopf.on.startup()
async def configure(settings, **_):
    if PREFIX:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX)
    report(time.monotonic())


@kopf.on.create("bench.trioperator.dev", "v1", "benchobjects")
async def create_fn(name, spec, **_):
    now = time.monotonic()
    counts["handled"] += 1
    counts["last_at"] = now
    if counts["first_at"] is None:
        counts["first_at"] = now
    handled = counts["handled"]
    if handled % EVERY == 0 or handled >= EXPECTED or now - reported["at"] >= 1.0:
        report(now)
    return {"message": "created", "by": FRAMEWORK, "size": len(spec)}
