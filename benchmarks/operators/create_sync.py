"""The operator under test, sync flavour: the same handler as create_async.py as a plain
function, so each framework runs it in its thread pool.

The same source runs under both frameworks; ``BENCH_FRAMEWORK`` (set by benchmarks/run.py)
picks the import.
"""

import os

FRAMEWORK = os.environ.get("BENCH_FRAMEWORK", "trioperator")

if FRAMEWORK == "kopf":
    import kopf
else:
    import trioperator as kopf


@kopf.on.create("bench.trioperator.dev", "v1", "benchobjects")
def create_fn(name, spec, **_):
    # -> status.create_fn = {...}; the harness waits for exactly this field.
    return {"message": "created", "by": FRAMEWORK, "size": len(spec)}
