"""An operator in the test's nursery against the fake API, on trio's mock clock."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
import trio
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI
from trioperator.testing._clockhold import ClockHold, threads_busy

if TYPE_CHECKING:
    from trioperator.testing._fakestore import Change

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kopf-example-1", "namespace": "default", "labels": {"a": "b"}},
    "spec": {"field": "value", "items": ["item1", "item2"]},
}


@pytest.fixture
def fake_api(fake_api: FakeAPI, crd: dict[str, Any]) -> FakeAPI:
    """Every runtime test has the example CRD (so ``crd_api`` is not for these tests)."""
    fake_api.create_object("customresourcedefinitions", crd)
    return fake_api


@pytest.fixture
def obj() -> dict[str, Any]:
    """A fresh copy of the example object's body, to create it in the fake directly."""
    return copy.deepcopy(OBJ)


class Running:
    """A running operator and helpers to wait for what it does, without real sleeps."""

    def __init__(self, operator: Operator, api: FakeAPI, nursery: trio.Nursery) -> None:
        self.operator = operator
        self.api = api
        self.nursery = nursery
        self.finished = trio.Event()
        """Set when ``Operator.main`` has returned (or raised)."""

    async def wait_for(self, predicate: Any, limit: float = 600) -> None:
        """Poll ``predicate`` every 10 ms of mock time; fail after ``limit`` seconds.

        The autojump clock jumps whenever every task waits, even while a worker thread runs
        user code (a sync handler, mapper, probe): on a busy machine, where a thread takes
        milliseconds to start, the clock could jump through the limit, the operator's timers
        or a client's timeout meanwhile. So while a thread runs, each poll first holds the
        clock still for a few real milliseconds, as the test kit's harness does (its
        ``ClockHold``): work in threads takes next to no mock time, as on an idle machine, and
        a thread that blocks on purpose (a sync daemon) still lets mock time pass.
        """
        with trio.fail_after(limit):
            hold = ClockHold(self.threads_busy)
            while not predicate():  # polling what the fake API holds
                await hold.pause(0.01)

    def threads_busy(self) -> bool:
        """Whether a worker thread runs now (the operator's, for user code, or trio's)."""
        context = self.operator.context
        return threads_busy(context.thread_limiter if context is not None else None)

    def obj(self, name: str = "kopf-example-1", namespace: str = "default") -> dict[str, Any]:
        return self.api.get_object("kopfexamples", name, namespace)

    def exists(self, name: str = "kopf-example-1", namespace: str = "default") -> bool:
        return self.api.has_object("kopfexamples", name, namespace)

    def create(self, body: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        body = copy.deepcopy(body or OBJ)
        body["metadata"].update(meta)
        return self.api.create_object("kopfexamples", body)

    def patch(
        self, patch: dict[str, Any], name: str = "kopf-example-1", namespace: str = "default"
    ) -> dict[str, Any]:
        """Change the object as another client would (body and status)."""
        return self.api.patch_object("kopfexamples", name, patch, namespace)

    def delete(self, name: str = "kopf-example-1", namespace: str = "default") -> None:
        self.api.delete_object("kopfexamples", name, namespace)

    def writes(self, name: str = "kopf-example-1") -> list[tuple[str, str, Any]]:
        """Non-GET requests to one object: ``(method, "" or "/status", body)``."""
        result = []
        for request in self.api.requests:
            if request.method == "GET" or "/kopfexamples/" not in request.path:
                continue
            path = request.path.split("/kopfexamples/", 1)[1]
            obj_name, _, sub = path.partition("/")
            if obj_name == name:
                result.append((request.method, f"/{sub}" if sub else "", request.body))
        return result

    @staticmethod
    def tasks(prefix: str) -> list[str]:
        """The names of the tasks alive now whose names start so (from trio's task tree)."""
        names: list[str] = []
        pending = [trio.lowlevel.current_root_task()]
        while pending:
            task = pending.pop()
            if task is None:
                continue
            if task.name.startswith(prefix):
                names.append(task.name)
            for nursery in task.child_nurseries:
                pending.extend(nursery.child_tasks)
        return names

    @classmethod
    def worker_tasks(cls) -> list[str]:
        """The names of the per-object worker tasks running now."""
        return cls.tasks("worker ")

    def workers(self) -> list[str]:
        """The per-object workers alive now: running in a task, or idle (a parked worker has no
        task until its next event, but lives until ``idle_timeout`` has passed), as the
        ``trioperator_workers`` metric counts them; the running ones by their task names."""
        alive = 0
        for line in self.operator.metrics.render().decode().splitlines():
            if line.startswith("trioperator_workers{"):
                alive += int(float(line.rsplit(" ", 1)[1]))
        running = self.worker_tasks()
        return running + ["worker (idle)"] * max(0, alive - len(running))

    @classmethod
    def daemons(cls) -> list[str]:
        """The names of the daemon and timer tasks alive now."""
        return cls.tasks("daemon ") + cls.tasks("timer ")

    async def stop(self) -> None:
        """Stop gracefully and wait until ``Operator.main`` returns.

        Polled, not awaited: while real I/O or a thread is in flight, an idle MockClock jumps
        to the next deadline; polling keeps those jumps to 10 ms instead of, e.g., straight
        to the end of the exit timeout.
        """
        self.operator.stop()
        await self.wait_for(self.finished.is_set)


@pytest.fixture
async def run_operator(
    fake_api: FakeAPI, registry: OperatorRegistry, settings: OperatorSettings
) -> AsyncIterator[Any]:
    async with trio.open_nursery() as nursery:
        started: list[Running] = []

        async def start() -> Running:
            vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
            operator = Operator(registry=registry, settings=settings, vault=vault)
            running = Running(operator, fake_api, nursery)

            async def main() -> None:
                try:
                    await operator.main()
                finally:
                    running.finished.set()

            nursery.start_soon(main)
            with trio.fail_after(60):
                await operator.ready_flag.wait()
            started.append(running)
            return running

        yield start
        for running in started:
            running.operator.stop()


class WatchGate:
    """Holds back the fake's watch events, to emulate a lagging watch stream.

    While ``holding``, committed changes are kept instead of being streamed; ``release()``
    streams the held ones in order (all, or the first ``count``); ``drop()`` forgets them.
    """

    def __init__(self, api: FakeAPI) -> None:
        self._listeners = list(api.store.listeners)
        api.store.listeners[:] = [self._on_change]
        self.holding = False
        self.held: list[Change] = []

    def _on_change(self, change: Change) -> None:
        if self.holding:
            self.held.append(change)
        else:
            self._stream(change)

    def _stream(self, change: Change) -> None:
        for listener in self._listeners:
            listener(change)

    def hold(self) -> None:
        self.holding = True

    def release(self, count: int | None = None, *, stop_holding: bool = False) -> None:
        released = self.held[:count] if count is not None else list(self.held)
        del self.held[: len(released)]
        if stop_holding:
            self.holding = False
        for change in released:
            self._stream(change)

    def drop(self) -> None:
        self.held.clear()


@pytest.fixture
def watch_gate(fake_api: FakeAPI) -> WatchGate:
    return WatchGate(fake_api)
