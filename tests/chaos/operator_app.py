"""The operator under chaos: every handler run is recorded as JSON lines in $CHAOS_RECORD.

A run writes ``start`` when it begins and ``done`` when it returns (the value it handled and
the pid of the operator process), so that the test can count runs lost and runs repeated.
Writes are single ``O_APPEND`` writes: a SIGKILL never leaves half a line behind.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import trio
import trioperator as kopf

RECORD = os.environ["CHAOS_RECORD"]
HANDLER_SECONDS = float(os.environ.get("CHAOS_HANDLER_SECONDS", "0.05"))
RESOURCE = ("chaos.trioperator.dev", "v1", "chaosobjects")


def record(event: str, handler: str, name: str, value: Any) -> None:
    line = {"event": event, "handler": handler, "name": name, "value": value}
    line.update(pid=os.getpid(), time=time.time())
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Short enough for the liveness probe to notice a dead or stalled watch within a case.
    settings.watching.inactivity_timeout = 5
    settings.networking.request_timeout = 15
    settings.posting.enabled = False  # events would only add noise to the request counts


async def run(handler: str, name: str, spec: Any) -> dict[str, Any]:
    value = spec.get("value")
    record("start", handler, name, value)
    await trio.sleep(HANDLER_SECONDS)
    record("done", handler, name, value)
    # The poisoned object's result breaks the status schema: every status patch gets a 422.
    return {"value": "poison" if spec.get("poison") else value}


@kopf.on.create(*RESOURCE)
async def create_fn(name: str, spec: Any, **_: Any) -> dict[str, Any]:
    return await run("create", name, spec)


@kopf.on.update(*RESOURCE, field="spec")
async def update_fn(name: str, spec: Any, **_: Any) -> dict[str, Any]:
    return await run("update", name, spec)


@kopf.on.delete(*RESOURCE)
async def delete_fn(name: str, spec: Any, **_: Any) -> None:
    await run("delete", name, spec)
