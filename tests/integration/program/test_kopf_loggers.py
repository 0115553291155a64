"""A Kopf operator that tunes Kopf's loggers gets the same log under ``import trioperator as kopf``.

Real operators silence the per-event success lines with
``logging.getLogger("kopf.objects").setLevel(logging.WARNING)`` and the same for
``kopf.activities.probe``. A whole operator runs here against the fake API (mock clock), with a
create handler, a probe asked for over HTTP, startup and cleanup handlers.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kopf-example-1", "namespace": "default"},
    "spec": {"field": "value"},
}


DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def annotations(api: FakeAPI) -> dict[str, str]:
    obj = api.get_object("kopfexamples", "kopf-example-1", "default")
    return dict(obj["metadata"].get("annotations") or {})


class Sink(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def root_sink() -> Iterator[Sink]:
    """What reaches the root logger (where the CLI's stream handler would be), at INFO."""
    sink = Sink()
    root = logging.getLogger()
    level = root.level
    root.addHandler(sink)
    root.setLevel(logging.INFO)
    try:
        yield sink
    finally:
        root.removeHandler(sink)
        root.setLevel(level)


@pytest.fixture
def tuned() -> Iterator[None]:
    """The operator's own logging setup, as in real Kopf operators."""
    names = ("kopf.objects", "kopf.activities.probe")
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


async def run(api: FakeAPI, registry: OperatorRegistry, settings: OperatorSettings) -> Any:
    vault = Vault({"fake": ConnectionInfo(server=api.url, token="fake")})
    operator = Operator(
        registry=registry,
        settings=settings,
        vault=vault,
        liveness_endpoint="http://127.0.0.1:0/healthz",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        api.create_object("kopfexamples", copy.deepcopy(OBJ))
        with trio.fail_after(60):
            while DIFFBASE not in annotations(api):  # noqa: ASYNC110 -- polling the fake API
                await trio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{operator.liveness_port}") as c:
            response = await c.get("/healthz")
        operator.stop()
    return response


async def test_kopf_objects_and_probe_at_warning_log_no_handler_info_lines(
    autojump_clock: Any,
    crd_api: FakeAPI,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    root_sink: Sink,
    tuned: None,
) -> None:
    seen: dict[str, str] = {}

    @kopf.on.startup(id="startup_fn", registry=registry)
    async def startup_fn(logger: Any, **_: Any) -> None:
        seen["startup"] = logger.name

    @kopf.on.cleanup(id="cleanup_fn", registry=registry)
    async def cleanup_fn(logger: Any, **_: Any) -> None:
        seen["cleanup"] = logger.name

    @kopf.on.probe(id="api_fn", registry=registry)
    async def api_fn(logger: Any, **_: Any) -> None:
        seen["probe"] = logger.name
        logger.info("Probing.")  # silenced: INFO on kopf.activities.probe

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(logger: Any, **_: Any) -> dict[str, str]:
        logger.info("Creating.")  # silenced
        logger.warning("Something to see.")  # not silenced
        return {"message": "done"}

    response = await run(crd_api, registry, settings)

    assert (response.status_code, response.json()) == (200, {})  # None is left out
    assert seen == {
        "startup": "kopf.activities.startup",
        "probe": "kopf.activities.probe",
        "cleanup": "kopf.activities.cleanup",
    }
    lines = [(r.name, r.levelname, r.getMessage()) for r in root_sink.records]
    silenced = {"kopf.objects", "kopf.activities.probe"}
    assert not [line for line in lines if line[0] in silenced and line[1] == "INFO"], lines
    assert ("kopf.objects", "WARNING", "Something to see.") in lines
    # The other activities are not silenced: their success lines are there, as under Kopf.
    assert ("kopf.activities.startup", "INFO", "Activity 'startup_fn' succeeded.") in lines
    assert ("kopf.activities.cleanup", "INFO", "Activity 'cleanup_fn' succeeded.") in lines


async def test_without_tuning_the_same_lines_are_there(
    autojump_clock: Any,
    crd_api: FakeAPI,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    root_sink: Sink,
) -> None:
    @kopf.on.probe(id="api_fn", registry=registry)
    async def api_fn(**_: Any) -> None:
        pass

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, str]:
        return {"message": "done"}

    await run(crd_api, registry, settings)
    lines = [(r.name, r.levelname, r.getMessage()) for r in root_sink.records]
    assert ("kopf.objects", "INFO", "Handler 'create_fn' succeeded.") in lines
    assert ("kopf.objects", "INFO", "Creation is processed: 1 succeeded; 0 failed.") in lines
    assert ("kopf.activities.probe", "INFO", "Activity 'api_fn' succeeded.") in lines
