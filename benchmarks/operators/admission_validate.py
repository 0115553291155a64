"""The operator under test for admission latency: one validating handler that allows everything.

The same source runs under both frameworks (``BENCH_FRAMEWORK`` picks the import). The handler
adds a warning, which the API server passes to the client: the harness counts a review only
when the warning proves that the handler ran. The server's certificate files, port and the
managed configuration's name come from the harness (benchmarks/bench_admission.py), so both
frameworks serve with the same certificate.
"""

import os

FRAMEWORK = os.environ.get("BENCH_FRAMEWORK", "trioperator")

if FRAMEWORK == "kopf":
    import kopf
else:
    import trioperator as kopf


@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["BENCH_WEBHOOK_PORT"]),
        certfile=os.environ["BENCH_WEBHOOK_CERT"],
        pkeyfile=os.environ["BENCH_WEBHOOK_KEY"],
        cafile=os.environ["BENCH_WEBHOOK_CA"],
    )
    settings.admission.managed = os.environ["BENCH_WEBHOOK_NAME"]


# ignore_failures: the API server stays usable even if the operator is gone mid-run.
# labels: the managed configuration gets an objectSelector, so the harness measures requests
# without the label (no webhook called) in the same window, as the baseline.
@kopf.on.validate(
    "bench.trioperator.dev",
    "v1",
    "benchobjects",
    ignore_failures=True,
    labels={"bench-admission": "reviewed"},
)
def check(spec, warnings, **_):
    warnings.append(f"checked by {FRAMEWORK}")
