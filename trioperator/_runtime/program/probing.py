"""The liveness endpoint (``--liveness http://host:port/path``): probe results and watchers' health.

``GET <path>`` answers like Kopf's: ``200`` with ``{handler_id: result}`` of the ``@on.probe``
handlers, run at most once per :data:`PROBE_CACHE_TTL` seconds however often the endpoint is
asked. A probe handler that fails makes it ``500`` with the error.

Beyond Kopf: the endpoint also fails (``500``) when a watcher has died, or has stalled -- it
is alive, but there has been no sign of progress from it for longer than its own inactivity
timeout allows. A healthy watcher of a quiet resource may receive nothing for hours, but it
reconnects every ``settings.watching.inactivity_timeout`` seconds, and the API server's answer
to a reconnection is a sign of life too (``WatchHealth.touch()``). Reconnection attempts that
nobody answers are not: a watcher that retries against a dead API server, whose requests hang
(a stalled connection), or that is blocked in the hand-over to its workers is stuck, and the
probe says so until the API server answers again.

The ``500`` body says what is wrong, e.g.::

    {"error": "The operator is unhealthy: 1 watcher(s) dead or stalled.",
     "watchers": {"kopfexamples.v1.kopf.dev in 'ns1'": "dead"},
     "probes": {"my_probe": "ZeroDivisionError: division by zero"}}
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, Final, TypeAlias

import trio

from trioperator._client.watching import WatchHealth
from trioperator._engine.errors import ActivityError, ErrorsMode
from trioperator._engine.handlers import Activity, ActivityHandler
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.program.activities import run_activity
from trioperator._runtime.support.httpserver import (
    Handler,
    Request,
    Response,
    for_queries,
    serve_http,
)
from trioperator._util.endpoints import parse_endpoint
from trioperator._util.lognames import framework_logger

__all__ = [
    "PROBE_CACHE_TTL",
    "STALL_GRACE",
    "HealthSource",
    "ProbeHealth",
    "WatchersMonitor",
    "serve_liveness",
]

logger = framework_logger("kopf._core.engines.probing", "trioperator.probing")

PROBE_CACHE_TTL: Final = 10.0
"""For how long (trio time, seconds) the results of the probe handlers are reused."""

STALL_GRACE: Final = 10.0
"""Extra seconds beyond a watcher's inactivity timeout (+ reconnect backoff) before it counts
as stalled: a reconnection or a listing takes a moment, and must not flap the probe."""


@dataclasses.dataclass(frozen=True)
class ProbeHealth:
    """The health of the operator's activities: what is wrong with which (nothing = healthy)."""

    problems: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.problems


HealthSource: TypeAlias = (
    Callable[[], ProbeHealth] | Mapping[str, WatchHealth] | Iterable[WatchHealth] | None
)
"""A callable giving the health on demand, or the live watchers' health signals (by name, or
unnamed); a mapping or a collection is read anew on every request, so it may change."""


class WatchersMonitor:
    """Judges watchers as dead or stalled from their :class:`WatchHealth` signals.

    Progress is any change of the signals: a line from the stream or an answered watch request
    (``last_activity``), a completed listing. Reconnections alone are not progress: against a
    dead or hanging API server a watcher reconnects forever. Changes of the counter are only
    seen when looked at, so each change is dated by the first look that saw it: never earlier
    than it happened, so a watcher is never judged quieter than it really has been.
    """

    def __init__(self, settings: OperatorSettings) -> None:
        self.settings = settings
        # id(health) -> (the object itself, to detect id reuse; its listings; when first seen).
        self._seen: dict[int, tuple[WatchHealth, int, float]] = {}

    def check(self, watchers: Mapping[str, WatchHealth]) -> ProbeHealth:
        now = trio.current_time()
        watching = self.settings.watching
        limit: float | None = None
        if watching.inactivity_timeout is not None:
            limit = watching.inactivity_timeout + watching.reconnect_backoff + STALL_GRACE
        problems: dict[str, str] = {}
        current: dict[int, tuple[WatchHealth, int, float]] = {}
        for name, health in watchers.items():
            counters = health.listings
            previous = self._seen.get(id(health))
            if previous is None or previous[0] is not health or previous[1] != counters:
                progressed_at = now
            else:
                progressed_at = previous[2]
            current[id(health)] = (health, counters, progressed_at)
            if not health.alive:
                problems[name] = "dead"
                continue
            quiet = min(health.silent_for(), now - progressed_at)
            if limit is not None and quiet > limit:
                problems[name] = f"stalled: no progress for {quiet:.0f} seconds"
        self._seen = current
        return ProbeHealth(problems)


async def serve_liveness(
    *,
    endpoint: str,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    memo: Any,
    execution: Execution,
    health: HealthSource = None,
    indices: Mapping[str, Any] | None = None,
    routes: Mapping[str, Handler] | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the liveness endpoint until cancelled; ``task_status.started()`` gets the port.

    ``endpoint`` is ``http://host:port/path`` (port ``0``: any free port, e.g. in tests).
    ``routes`` are other paths served on the same port (the metrics, when they share it).
    """
    extra = dict(routes or {})
    host, port, path = parse_endpoint(endpoint)
    monitor = WatchersMonitor(settings)
    probes = _ProbeCache(
        registry=registry, settings=settings, memo=memo, execution=execution, indices=indices
    )

    async def handle(request: Request) -> Response:
        if request.path != path and request.path in extra:
            return await extra[request.path](request)
        if request.path != path:
            return _json(404, {"error": f"Not found: {request.path}"})
        if request.method != "GET":
            return _json(405, {"error": f"Method not allowed: {request.method}"}, allow="GET")
        watchers = _judge(health, monitor)
        results, failures = await probes.get()
        if watchers.healthy and not failures:
            return _json(200, results)
        parts = []
        if watchers.problems:
            parts.append(f"{len(watchers.problems)} watcher(s) dead or stalled")
        if failures:
            parts.append(f"{len(failures)} probe(s) failed")
        body: dict[str, Any] = {"error": f"The operator is unhealthy: {'; '.join(parts)}."}
        if watchers.problems:
            body["watchers"] = dict(watchers.problems)
        if failures:
            body["probes"] = failures
        return _json(500, body)

    async with trio.open_nursery() as nursery:
        limits = for_queries(settings.serving)
        serve = partial(serve_http, handle, host=host, port=port, limits=limits)
        listeners = await nursery.start(serve)
        bound = listeners[0].socket.getsockname()[1]
        logger.info(f"Serving the liveness endpoint at http://{_netloc(host, bound)}{path}")
        task_status.started(bound)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _judge(health: HealthSource, monitor: WatchersMonitor) -> ProbeHealth:
    if health is None:
        return ProbeHealth()
    if isinstance(health, Mapping):
        return monitor.check(health)
    if callable(health):
        return health()
    unnamed = list(health)
    return monitor.check({f"watcher #{index}": item for index, item in enumerate(unnamed, 1)})


class _ProbeCache:
    """Runs the probe handlers at most once per :data:`PROBE_CACHE_TTL`; concurrent requests
    for stale results wait for the one run instead of starting their own."""

    def __init__(
        self,
        *,
        registry: OperatorRegistry,
        settings: OperatorSettings,
        memo: Any,
        execution: Execution,
        indices: Mapping[str, Any] | None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.memo = memo
        self.execution = execution
        self.indices = indices
        self.lock = trio.Lock()
        self.expires = -math.inf
        self.results: dict[str, Any] = {}
        self.failures: dict[str, str] = {}

    async def get(self) -> tuple[dict[str, Any], dict[str, str]]:
        async with self.lock:
            if trio.current_time() >= self.expires:
                self.results, self.failures = await self._run()
                # Failures are cached too: a failing probe must not be hammered either.
                self.expires = trio.current_time() + PROBE_CACHE_TTL
            return self.results, self.failures

    async def _run(self) -> tuple[dict[str, Any], dict[str, str]]:
        handlers = [_once(h) for h in self.registry.get_activity_handlers(Activity.PROBE)]
        if not handlers:
            return {}, {}
        try:
            outcomes = await run_activity(
                handlers,
                activity=Activity.PROBE,
                execution=self.execution,
                settings=self.settings,
                memo=self.memo,
                indices=self.indices,
            )
        except ActivityError as exc:
            return {}, {hid: _describe(error) for hid, error in exc.outcomes.items()}
        # As Kopf: a probe that returns None is left out of the answer (``{}``, not ``null``).
        results = {str(hid): o.result for hid, o in outcomes.items() if o.result is not None}
        return results, {}


def _once(handler: ActivityHandler) -> ActivityHandler:
    """A probe answers now: with no retry options of its own, a failure is final at once
    (the default for handlers -- retrying after a backoff -- would hang the request)."""
    if handler.errors is None and handler.retries is None and handler.timeout is None:
        return dataclasses.replace(handler, errors=ErrorsMode.PERMANENT)
    return handler


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _json(status: int, payload: Any, **headers: str) -> Response:
    # Probe results are whatever the handlers return: anything not JSON-native is shown as text.
    body = json.dumps(payload, default=str).encode()
    return Response(status, body, headers=headers)
