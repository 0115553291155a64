"""The operator under attack (benchmarks/bench_attacks.py).

One validating handler (filtered by a label, so the managed configuration has an
``objectSelector`` and other requests never reach it) that allows everything and adds a
warning, so that a client of the API server can tell that its dry-run create was reviewed; one
create handler whose result lands in ``status.create_fn`` (the watch still works); one probe.
The webhooks are served over TLS on loopback with the harness's certificate (``WebhookServer``
with ``certfile``/``pkeyfile``/``cafile``), and the configuration is managed by the operator.

``ATTACK_SERVING`` is a JSON object of ``settings.serving`` fields to override (e.g.
``{"idle_timeout": 5}``); the defaults are used otherwise.
"""

import json
import os

import trioperator as kopf

LABEL = {"bench-attack": "reviewed"}


@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["ATTACK_WEBHOOK_PORT"]),
        certfile=os.environ["ATTACK_WEBHOOK_CERT"],
        pkeyfile=os.environ["ATTACK_WEBHOOK_KEY"],
        cafile=os.environ["ATTACK_WEBHOOK_CA"],
    )
    settings.admission.managed = os.environ["ATTACK_WEBHOOK_NAME"]
    for name, value in json.loads(os.environ.get("ATTACK_SERVING") or "{}").items():
        setattr(settings.serving, name, value)


# ignore_failures: the API server stays usable (fails open) if the operator is gone.
@kopf.on.validate(
    "bench.trioperator.dev", "v1", "benchobjects", id="check", ignore_failures=True, labels=LABEL
)
def check(warnings, **_):
    warnings.append("checked under attack")


@kopf.on.create("bench.trioperator.dev", "v1", "benchobjects")
async def create_fn(**_):
    return {"handled": True}


@kopf.on.probe(id="alive")
def alive(**_):
    return True
