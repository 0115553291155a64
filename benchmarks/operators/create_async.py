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


@kopf.on.create("bench.trioperator.dev", "v1", "benchobjects")
async def create_fn(name, spec, **_):
    # -> status.create_fn = {...}; the harness waits for exactly this field.
    return {"message": "created", "by": FRAMEWORK, "size": len(spec)}
