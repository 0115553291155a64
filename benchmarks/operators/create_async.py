"""The operator under test, async flavour: one creation handler whose result lands in status.

The same source runs under both frameworks; ``BENCH_FRAMEWORK`` (set by benchmarks/run.py)
picks the import, so the only difference between the two runs is the framework itself.
"""

import os

FRAMEWORK = os.environ.get("BENCH_FRAMEWORK", "trioperator")

if FRAMEWORK == "kopf":
    import kopf
else:
    import trioperator as kopf

TRACING = bool(os.environ.get("BENCH_TRACE"))
if TRACING:  # open-loop runs: where each object's time goes (see tracing.py)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tracing

    tracing.install(FRAMEWORK)

    @kopf.on.startup()
    async def start_tracing(**_):
        tracing.start_lag_sampler()


@kopf.on.create("bench.trioperator.dev", "v1", "benchobjects")
async def create_fn(name, spec, **_):
    if TRACING:
        tracing.record("h", name, tracing.time.monotonic())
    # -> status.create_fn = {...}; the harness waits for exactly this field.
    return {"message": "created", "by": FRAMEWORK, "size": len(spec)}
