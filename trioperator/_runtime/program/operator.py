"""The operator: the root of the nursery tree, and the order in which things start and stop.

Task tree (every task belongs to exactly one nursery; nothing outlives ``Operator.main``)::

    Operator.main                         asyncio loop + bridge nursery (asyncio_bridge.py),
    │                                     only if asyncio-flavoured code is registered;
    │                                     opened first, closed last
    └── guards nursery, in the exiting scope (see below)
        ├── signals                       1st SIGINT/SIGTERM: graceful stop; 2nd: cancel now
        ├── exiting limit                 stop_flag -> startup ended; ultimate exiting timeout
        └── (main task)                   startup handlers, the root nursery, cleanup handlers

    root nursery (of the main task, after the startup)
    ├── liveness (with -L)                on.probe results + the health of every watcher
    │                                     (+ the metrics, when they share its host:port)
    ├── metrics (with --metrics)          Prometheus' text format of the operator's metrics
    ├── memory trimmer                    free memory back to the system, every few minutes
    ├── authenticator                     login handlers -> credentials vault; re-login on 401
    └── posting nursery
        ├── event poster                  queued k8s Events -> POST; drained on a graceful stop
        └── peering nursery               keep-alives + peering observers (unless standalone);
            │                             cancelled after serving: our record is removed last
            └── serving nursery
                ├── stop watcher          stop_flag -> graceful stop (the stopping event)
                ├── orchestrator          namespaces & CRDs observed -> watchers started/stopped
                │   └── run_watcher per (resource, namespace)
                │       ├── stream_events list + watch (closed while paused by peering)
                │       ├── run_worker    per object: cause -> handlers -> one patch
                │       └── daemons, timers  per object, in the watcher's background nursery
                └── admission             webhook server + managed webhook configurations

Start order, and why:
1. ``on.startup`` handlers, before anything touches the cluster: they may change settings.
2. The authenticator, awaited until the vault holds credentials: nothing can call the API
   before that.
3. The event poster, so that handlers can post from their first call.
4. The orchestrator: discovery, then one watcher per served (resource, namespace); each
   reports started after its initial listing is routed.
5. Admission (with webhook handlers): the server, then the managed configurations, which
   need the discovered resources. Then ``ready_flag`` is set.

Stop order, and why (a graceful phase first, then, if needed, a forced one):
1. The stop request -- the first SIGINT/SIGTERM, or ``stop_flag`` -- ends a startup still in
   progress (then nothing is served nor cleaned up) and starts the clock of
   ``settings.process.ultimate_exiting_timeout``.
2. It sets ``stopping``: the non-persistent managed webhooks are removed, then the webhook
   server stops; the watchers end their streams at once, so no new handlers start;
   workers finish what is queued and running handlers may finish, within
   ``queueing.exit_timeout`` (then they are cancelled); daemons and timers get their stop flag
   and their staged termination (see ``daemon_keeper.py``).
3. The poster posts what is still queued (within ``posting.DRAIN_TIMEOUT``); then the rest
   of the root nursery (authenticator, liveness) is cancelled.
4. ``on.cleanup`` handlers run, after every watcher, worker and handler has ended: shielded
   (a failure of the operator does not cut them short), for at most ``CLEANUP_TIMEOUT``.
5. The API clients (the operator's own, and that of operator code) and the vault are closed.

Forced end: a second SIGINT/SIGTERM, or the ultimate exiting timeout (logged as an error),
cancels everything at once, the cleanup included; ``None`` waits for the graceful stop for
ever. Kopf SIGKILLs its own process instead; cancelling keeps an embedding program alive. What
cannot be cancelled still ends on its own: a sync handler's thread is waited for.
"""

from __future__ import annotations

import signal
from collections.abc import Collection
from functools import partial
from typing import Any

import trio

from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, LoginError, Vault
from trioperator._client.piggybacking import fallback_login_functions
from trioperator._client.resources import Resource
from trioperator._client.watching import WatchHealth
from trioperator._engine.errors import ActivityError, ErrorsMode
from trioperator._engine.flavors import FlavorSetting
from trioperator._engine.handlers import Activity, ActivityHandler, BaseHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.memos import Memo
from trioperator._engine.peering import detect_own_id
from trioperator._engine.registry import OperatorRegistry, get_default_registry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.admission.admission import AdmissionServing, run_admission
from trioperator._runtime.coordination.peering import Peering, run_peering
from trioperator._runtime.coordination.sharding import run_sharding
from trioperator._runtime.handling.apiclients import OperatorAPIs, serving_apis
from trioperator._runtime.handling.asyncio_bridge import run_with_asyncio
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.handling.invocation import DEFAULT_THREAD_LIMIT, make_limiter
from trioperator._runtime.handling.posting import (
    K8sEvent,
    install_poster,
    open_poster_channel,
    run_poster,
)
from trioperator._runtime.pipeline.contexts import OperatorContext
from trioperator._runtime.program.activities import run_activity
from trioperator._runtime.program.options import OperatorOptions
from trioperator._runtime.program.orchestration import Orchestration
from trioperator._runtime.program.probing import serve_liveness
from trioperator._runtime.support.httpserver import Handler, Request, Response
from trioperator._runtime.support.memory_trim import trim_memory_forever
from trioperator._runtime.support.metrics import OperatorMetrics, metrics_response, serve_metrics
from trioperator._util.endpoints import parse_endpoint
from trioperator._util.lognames import framework_logger

# Kopf's names: the operator's run as a whole, and its logging in.
logger = framework_logger("kopf._core.reactor.running")
auth_logger = framework_logger("kopf._core.engines.activities")

CLEANUP_TIMEOUT = 60
"""How long ``on.cleanup`` handlers may take after a stop (they run shielded)."""


class Operator:
    """One operator: its handlers, settings and scope. Run it with ``trio.run(op.main)``.

    Several operators with separate registries can run in one process (in one trio run).
    """

    def __init__(
        self,
        *,
        registry: OperatorRegistry | None = None,
        settings: OperatorSettings | None = None,
        memo: Any = None,
        vault: Vault | None = None,
        namespaces: Collection[str] = (),
        clusterwide: bool = False,
        handle_signals: bool = False,
        liveness_endpoint: str | None = None,
        metrics_endpoint: str | None = None,
        standalone: bool | None = None,
        priority: int | None = None,
        peering_name: str | None = None,
        identity: str | None = None,
        async_flavor: FlavorSetting | None = None,
    ) -> None:
        """The options are those of :class:`OperatorOptions` (see :meth:`from_options`)."""
        self._configure(
            OperatorOptions(
                registry=registry,
                settings=settings,
                memo=memo,
                vault=vault,
                namespaces=namespaces,
                clusterwide=clusterwide,
                handle_signals=handle_signals,
                liveness_endpoint=liveness_endpoint,
                metrics_endpoint=metrics_endpoint,
                standalone=standalone,
                priority=priority,
                peering_name=peering_name,
                identity=identity,
                async_flavor=async_flavor,
            )
        )

    @classmethod
    def from_options(cls, options: OperatorOptions) -> Operator:
        """The operator of these options: how the CLI, ``run()``/``operator()`` and the test
        kit make one, from the one record they built."""
        operator = cls.__new__(cls)
        operator._configure(options)
        return operator

    def _configure(self, options: OperatorOptions) -> None:
        self.options = options
        """What this operator was made with (the defaults are filled in below, not there)."""
        self.registry = options.registry if options.registry is not None else get_default_registry()
        self.settings = options.settings if options.settings is not None else OperatorSettings()
        self.memo = options.memo if options.memo is not None else Memo()
        self.vault = options.vault if options.vault is not None else Vault()
        self.namespaces = tuple(options.namespaces)
        self.clusterwide = options.clusterwide or not self.namespaces
        # As in Kopf: into the settings before the startup handlers, which may change them. A
        # peering named explicitly is mandatory (paused until it exists); "default" is optional.
        peering = self.settings.peering
        peering.clusterwide = self.clusterwide
        if options.peering_name is not None:
            peering.name = options.peering_name
            peering.mandatory = True
        if options.standalone is not None:
            peering.standalone = options.standalone
        if options.priority is not None:
            peering.priority = options.priority
        if options.async_flavor is not None:
            self.settings.execution.async_flavor = options.async_flavor  # validated there
        self.identity = options.identity if options.identity is not None else detect_own_id()
        """This operator's key in the peering objects (``POD_ID``, else user@host/time/xyz)."""
        self.handle_signals = options.handle_signals
        self.liveness_endpoint = options.liveness_endpoint
        """``http://host:port/path`` to serve the liveness probe on; ``None``: not served."""
        self.watchers_health: dict[str, WatchHealth] = {}
        """The health signals of the running watchers, by name, for the liveness probe."""
        self.liveness_port: int | None = None
        """The port the liveness endpoint is bound to (e.g. when asked for port 0)."""
        self.metrics_endpoint = options.metrics_endpoint
        """``http://host:port/path`` to serve the metrics on; ``None``: not served (they are
        collected anyway: ``metrics.render()``). The liveness endpoint's host and port (not
        port 0) serve both on one server."""
        # Refused now, not when serving.
        check_endpoints(options.liveness_endpoint, options.metrics_endpoint)
        self.metrics_port: int | None = None
        """The port the metrics endpoint is bound to (e.g. when asked for port 0)."""
        self.metrics = OperatorMetrics()
        """The operator's Prometheus metrics, in a registry of its own."""
        self.ready_flag = trio.Event()
        """Set when every watcher has routed its initial listing."""
        self.stop_flag = trio.Event()
        """Set it to stop the operator gracefully."""
        self.api: APIClient | None = None
        self.context: OperatorContext | None = None
        """The running operator's shared state (for introspection and test kits)."""
        self.orchestration: Orchestration | None = None
        self._exiting: _Exiting | None = None

    def stop(self) -> None:
        self.stop_flag.set()

    async def main(self) -> None:
        """Run until stopped; raise if startup fails (before any watching starts).

        The asyncio loop for asyncio-flavoured handlers, if any is registered, is opened
        first and closed last: startup and cleanup handlers may be asyncio-flavoured too.
        """
        try:
            await run_with_asyncio(
                self._main,
                settings=self.settings.execution,
                handlers=self._all_handlers,
            )
        except BaseExceptionGroup as group:
            raise single_error(group) from None

    def _all_handlers(self) -> list[BaseHandler]:
        """What may run in this operator: the registry's handlers, or the fallback logins."""
        handlers: list[BaseHandler] = list(self.registry.iter_all_handlers())
        if not self.registry.get_activity_handlers(Activity.AUTHENTICATION):
            handlers.extend(_fallback_login_handlers())
        return handlers

    def cancel_now(self) -> None:
        """Cancel everything now, the cleanup too (as a second SIGINT/SIGTERM does)."""
        self.stop_flag.set()
        if self._exiting is not None:
            self._exiting.cancel_now()

    async def _main(self) -> None:
        settings = self.settings
        context = OperatorContext(
            api=None,  # type: ignore[arg-type]  # set below, once credentials exist
            registry=self.registry,
            settings=settings,
            memo=self.memo,
            thread_limiter=make_limiter(settings.execution.max_workers),
        )
        context.metrics = self.metrics
        self.metrics.context = context
        self.context = context
        execution = Execution.for_operator(context)

        # k8s Events: from here on, trioperator.event() & co. (in this task, the tasks it
        # starts, and their threads) queue to this operator; the poster posts them once the API
        # is reachable (so even startup handlers may post).
        send_events, receive_events = open_poster_channel()
        exiting = self._exiting = _Exiting()
        with install_poster(send_events, settings=settings), exiting.scope:
            try:
                async with trio.open_nursery() as guards:
                    # Signals and the stop's time limit live as long as the operator does: a
                    # stop may come during the startup, and its limits bound the cleanup too.
                    if self.handle_signals:
                        await guards.start(_watch_signals, self.stop_flag, exiting)
                    guards.start_soon(_limit_exiting, self.stop_flag, exiting, settings)
                    try:
                        await self._run(context, execution, exiting, send_events, receive_events)
                    finally:
                        guards.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                # Callers (the CLI, embedders) get the operator's own error, e.g. the startup's
                # ActivityError, not the nurseries' wrapping of it.
                raise single_error(group) from None

    async def _run(
        self,
        context: OperatorContext,
        execution: Execution,
        exiting: _Exiting,
        send_events: trio.MemorySendChannel[K8sEvent],
        receive_events: trio.MemoryReceiveChannel[K8sEvent],
    ) -> None:
        """Startup, serving, cleanup: the part of the operator that signals may stop."""
        settings = context.settings
        with exiting.startup:
            await self._run_activity(Activity.STARTUP, execution)
        if exiting.startup.cancelled_caught:
            # Not started, so nothing to clean up: as when a startup handler fails.
            logger.warning("Stop requested during the startup: the startup is not finished.")
            return
        # Startup handlers may have changed the settings (e.g. max_workers).
        context.thread_limiter.total_tokens = settings.execution.max_workers or DEFAULT_THREAD_LIMIT
        execution.default_backoff = settings.execution.default_backoff

        # The API client for operator code (the handlers' `api` kwarg): made on first use,
        # from the serving on (the startup handlers run before any login), closed last.
        apis = OperatorAPIs(self.vault, token=trio.lowlevel.current_trio_token())
        with serving_apis(apis):
            try:
                async with trio.open_nursery() as root:
                    shared = check_endpoints(self.liveness_endpoint, self.metrics_endpoint)
                    routes: dict[str, Handler] = {}
                    if self.metrics_endpoint is not None and shared:
                        routes[parse_endpoint(self.metrics_endpoint)[2]] = self._scrape
                    if self.liveness_endpoint is not None:
                        self.liveness_port = await root.start(
                            partial(
                                serve_liveness,
                                endpoint=self.liveness_endpoint,
                                registry=self.registry,
                                settings=settings,
                                memo=self.memo,
                                execution=execution,
                                health=self.watchers_health,
                                indices=context.indices,
                                routes=routes,
                            )
                        )
                    if self.metrics_endpoint is not None and shared:
                        self.metrics_port = self.liveness_port
                    elif self.metrics_endpoint is not None:
                        self.metrics_port = await root.start(
                            partial(
                                serve_metrics,
                                endpoint=self.metrics_endpoint,
                                metrics=self.metrics,
                                limits=settings.serving,
                            )
                        )
                    await root.start(trim_memory_forever, settings.process.memory_trim_interval)
                    await root.start(self._run_authenticator, execution)
                    api = self.api = context.api = APIClient(
                        self.vault, settings.networking, observer=self.metrics
                    )
                    try:
                        async with trio.open_nursery() as posting:
                            await posting.start(
                                partial(
                                    run_poster,
                                    api,
                                    settings=settings,
                                    receive=receive_events,
                                )
                            )
                            try:
                                await self._serve(context, execution)
                            finally:
                                # Nothing is handled any more: the poster posts what is queued
                                # (for a bounded time) and exits. If serving failed, the
                                # nursery cancels the poster at once instead.
                                send_events.close()
                    finally:
                        root.cancel_scope.cancel()
            finally:
                try:
                    # Shielded (a failure or a graceful stop must not cut the cleanup short), but
                    # within the stop's limits: the ultimate exiting timeout, a second signal.
                    with exiting.cleanup(CLEANUP_TIMEOUT):
                        await self._run_activity(Activity.CLEANUP, execution)
                finally:
                    if self.api is not None:
                        with trio.CancelScope(shield=True):
                            await self.api.aclose()
                    with trio.CancelScope(shield=True):
                        await apis.aclose()
                    self.vault.close()

    async def _serve(self, context: OperatorContext, execution: Execution) -> None:
        assert self.api is not None
        # Peering and the shard's Lease outlive the serving: our record and our Lease go only
        # once the watchers are done.
        async with trio.open_nursery() as peering_nursery:
            sharding = context.settings.sharding
            if sharding.enabled:
                context.shard = await peering_nursery.start(
                    partial(
                        run_sharding,
                        api=self.api,
                        settings=context.settings,
                        identity=self.identity,
                        now=context.now,
                    ),
                    name="sharding",
                )
            peering: Peering | None = None
            if not context.settings.peering.standalone:
                peering = await peering_nursery.start(
                    partial(
                        run_peering,
                        api=self.api,
                        settings=context.settings,
                        # The replicas of a ring are one operator to peering: they must not
                        # pause each other as equals; a freeze pauses them all.
                        identity=f"shard-ring/{sharding.ring}"
                        if sharding.enabled
                        else self.identity,
                        pause=context.pause,
                        now=context.now,
                    )
                )
            try:
                await self._serve_peered(context, execution, peering)
            finally:
                peering_nursery.cancel_scope.cancel()

    async def _serve_peered(
        self, context: OperatorContext, execution: Execution, peering: Peering | None
    ) -> None:
        assert self.api is not None
        async with trio.open_nursery() as serving:
            serving.start_soon(_stop_on_flag, self.stop_flag, context.stopping)
            # The orchestrator starts every initial watcher in one synchronous step; each takes
            # the indexing gate before its first checkpoint, so nothing runs before indexing.
            orchestration = self.orchestration = Orchestration(
                context,
                api=self.api,
                registry=self.registry,
                settings=context.settings,
                namespaces_patterns=self.namespaces,
                clusterwide=self.clusterwide,
                health=self.watchers_health,
                peering=peering,
            )
            await serving.start(orchestration.run)
            # After the orchestrator: the resources that reviews may be about are known now.
            await serving.start(
                partial(
                    run_admission,
                    api=self.api,
                    registry=self.registry,
                    settings=context.settings,
                    fn=AdmissionServing(
                        registry=self.registry,
                        settings=context.settings,
                        memo=self.memo,
                        indices=context.indices,
                        insights=orchestration,
                        execution=execution,
                        metrics=self.metrics,
                    ),
                    insights=orchestration,
                    stopping=context.stopping,
                ),
                name="admission",
            )
            self.ready_flag.set()
            logger.info(f"The operator is ready: serving {len(self.served)} resource(s).")
            await context.stopping.wait()
            logger.info("Stop requested; finishing the work in progress.")

    async def _scrape(self, request: Request) -> Response:
        return metrics_response(self.metrics, request)

    @property
    def served(self) -> frozenset[Resource]:
        """The resources being served now (they change as CRDs come and go)."""
        return self.orchestration.resources if self.orchestration is not None else frozenset()

    async def _run_activity(self, activity: Activity, execution: Execution) -> None:
        handlers = self.registry.get_activity_handlers(activity)
        if handlers:
            await run_activity(
                handlers,
                activity=activity,
                execution=execution,
                settings=self.settings,
                memo=self.memo,
                # The indices as they are: full for probes and cleanup, empty at startup.
                indices=self.context.indices if self.context is not None else None,
            )

    async def _run_authenticator(
        self,
        execution: Execution,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep the vault populated: log in at start and whenever all credentials failed."""
        handlers = self.registry.get_activity_handlers(Activity.AUTHENTICATION)
        if not handlers:
            handlers = _fallback_login_handlers()
        reported = False
        logins = 0
        while True:
            if not self.vault.is_empty():
                # Given credentials (embedding, tests) or a successful re-login: nothing to do.
                if not reported:
                    reported = True
                    task_status.started()
                await self.vault.wait_for_emptiness()
                continue
            # Kopf's lines, and its logger (kopf._core.engines.activities).
            title = "Re-authentication" if logins else "Initial authentication"
            logins += 1
            auth_logger.info(f"{title} has been initiated.")
            try:
                outcomes = await run_activity(
                    handlers,
                    activity=Activity.AUTHENTICATION,
                    execution=execution,
                    settings=self.settings,
                    memo=self.memo,
                    indices=self.context.indices if self.context is not None else None,
                )
            except ActivityError as exc:
                outcomes = {}
                auth_logger.error(f"Login failed: {exc}")
            infos = {
                str(hid): outcome.result
                for hid, outcome in outcomes.items()
                if isinstance(outcome.result, ConnectionInfo)
            }
            if infos:
                auth_logger.info(f"{title} has finished.")
                await self.vault.populate(infos)
            else:
                auth_logger.warning(
                    f"{title} has failed: no credentials were retrieved from the login handlers."
                )
            if self.vault.is_empty():
                error = LoginError("Ran out of valid credentials: no login handler gave any.")
                self.vault.fail(error)
                if not reported:
                    raise error
                # Wait for the next request for credentials instead of retrying in a loop.
                await self.vault.wait_for_emptiness()


def check_endpoints(liveness: str | None, metrics: str | None) -> bool:
    """Whether the metrics share the liveness endpoint's server (the same host and port).

    Raises ``ValueError`` for an endpoint that cannot be served, before anything starts.
    """
    if metrics is None:
        return False
    host, port, path = parse_endpoint(metrics, what="metrics")
    if liveness is None:
        return False
    liveness_host, liveness_port, liveness_path = parse_endpoint(liveness)
    if (host, port) != (liveness_host, liveness_port) or port == 0:
        return False  # port 0 means "any free port": one for each endpoint
    if path == liveness_path:
        raise ValueError(
            f"The metrics and the liveness endpoints are both at {metrics!r}:"
            " give the metrics another path (e.g. /metrics)."
        )
    return True


def _fallback_login_handlers() -> list[ActivityHandler]:
    # Kopf's piggybacking: the client libraries that are installed, else our own readers.
    return [
        ActivityHandler(
            fn=fn,
            id=HandlerId(fn.__name__),
            activity=Activity.AUTHENTICATION,
            errors=ErrorsMode.IGNORED,
        )
        for fn in fallback_login_functions()
    ]


async def _stop_on_flag(stop_flag: trio.Event, stopping: trio.Event) -> None:
    await stop_flag.wait()
    stopping.set()


class _Exiting:
    """The limits of a stop: the ultimate exiting timeout, and "cancel now" (a second signal).

    A graceful stop is the work of the watchers and workers (``context.stopping``). This is
    what bounds it from outside: ``scope`` encloses everything the operator does, and the
    cleanup runs in a shielded scope of its own (so that a failure or an ordinary cancellation
    lets it run), which therefore has to be cancelled explicitly too.
    """

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.startup = trio.CancelScope()
        """Around the startup handlers: a stop before serving starts does not wait for them."""
        self._cleanup = trio.CancelScope(shield=True)

    def cleanup(self, timeout: float) -> trio.CancelScope:
        """The shielded scope for the cleanup handlers, which may take up to ``timeout``."""
        self._cleanup.deadline = min(self._cleanup.deadline, trio.current_time() + timeout)
        return self._cleanup

    def cancel_now(self) -> None:
        self.scope.cancel()
        self._cleanup.cancel()


async def _limit_exiting(
    stop_flag: trio.Event, exiting: _Exiting, settings: OperatorSettings
) -> None:
    """From a stop request on: no more startup; cancel all after the ultimate exiting timeout.

    This is Kopf's forced exit (a SIGKILL of its own process) done the trio way: everything is
    cancelled, so the operator's caller -- an embedding program too -- survives it.
    """
    await stop_flag.wait()
    exiting.startup.cancel()
    # Read only now: startup handlers may have changed it.
    timeout: float | None = settings.process.ultimate_exiting_timeout
    if timeout is None:
        return  # wait for the graceful stop as long as it takes
    await trio.sleep(timeout)
    logger.error(
        f"The operator has not exited within {timeout} seconds after the stop request"
        " (settings.process.ultimate_exiting_timeout): cancelling everything now."
    )
    exiting.cancel_now()


async def _watch_signals(
    stop_flag: trio.Event,
    exiting: _Exiting,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """First SIGINT/SIGTERM: graceful stop. Second: cancel everything now."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if stop_flag.is_set():
                logger.warning(f"Signal {signal.Signals(signum).name} again: cancelling now.")
                exiting.cancel_now()
                return
            # Kopf's line (the graceful stop is trioperator's, the words are Kopf's).
            logger.info(f"Signal {signal.Signals(signum).name} is received. Operator is stopping.")
            stop_flag.set()


def single_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The only error inside nested one-error groups (the nursery tree wraps each failure)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
