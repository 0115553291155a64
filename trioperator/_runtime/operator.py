"""The operator: the root of the nursery tree, and the order in which things start and stop.

Task tree (every task belongs to exactly one nursery; nothing outlives ``Operator.main``)::

    Operator.main                         root nursery
    ├── signals                           1st SIGINT/SIGTERM: graceful stop; 2nd: cancel now
    ├── liveness (with -L)                on.probe results + the health of every watcher
    ├── authenticator                     login handlers -> credentials vault; re-login on 401
    └── posting nursery
        ├── event poster                  queued k8s Events -> POST; drained on a graceful stop
        └── serving nursery
            ├── stop watcher              stop_flag -> graceful stop (the stopping event)
            └── orchestrator              namespaces & CRDs observed -> watchers started/stopped
                └── run_watcher per (resource, namespace)
                    ├── stream_events     list + watch; the router indexes each event first
                    ├── run_worker        per object: cause -> handlers -> one patch
                    └── daemons, timers   per object, in the watcher's background nursery

Start order, and why:
1. ``on.startup`` handlers, before anything touches the cluster: they may change settings.
2. The authenticator, awaited until the vault holds credentials: nothing can call the API
   before that.
3. The event poster, so that handlers can post from their first call.
4. The orchestrator: discovery, then one watcher per served (resource, namespace); each
   reports started after its initial listing is routed. Then ``ready_flag`` is set.

Stop order: the stop request (a signal or ``stop_flag``) sets ``stopping``: watchers end their
streams and let workers finish what is queued within ``queueing.exit_timeout``; then the rest
(authenticator) is cancelled and ``on.cleanup`` handlers run, shielded, with a deadline.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Collection
from functools import partial
from typing import Any

import trio

from trioperator._client.api import APIClient
from trioperator._client.config import login_with_kubeconfig, login_with_service_account
from trioperator._client.credentials import ConnectionInfo, LoginError, Vault
from trioperator._client.resources import Resource
from trioperator._client.watching import WatchHealth
from trioperator._engine.errors import ActivityError, ErrorsMode
from trioperator._engine.handlers import Activity, ActivityHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.memos import Memo
from trioperator._engine.registry import OperatorRegistry, get_default_registry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.activities import run_activity
from trioperator._runtime.contexts import OperatorContext
from trioperator._runtime.execution import Execution
from trioperator._runtime.invocation import DEFAULT_THREAD_LIMIT, make_limiter
from trioperator._runtime.orchestration import Orchestration, run_orchestrator
from trioperator._runtime.posting import install_poster, open_poster_channel, run_poster
from trioperator._runtime.probing import serve_liveness

logger = logging.getLogger("trioperator")

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
    ) -> None:
        self.registry = registry if registry is not None else get_default_registry()
        self.settings = settings if settings is not None else OperatorSettings()
        self.memo = memo if memo is not None else Memo()
        self.vault = vault if vault is not None else Vault()
        self.namespaces = tuple(namespaces)
        self.clusterwide = clusterwide or not self.namespaces
        self.handle_signals = handle_signals
        self.liveness_endpoint = liveness_endpoint
        """``http://host:port/path`` to serve the liveness probe on; ``None``: not served."""
        self.watchers_health: dict[str, WatchHealth] = {}
        """The health signals of the running watchers, by name, for the liveness probe."""
        self.liveness_port: int | None = None
        """The port the liveness endpoint is bound to (e.g. when asked for port 0)."""
        self.ready_flag = trio.Event()
        """Set when every watcher has routed its initial listing."""
        self.stop_flag = trio.Event()
        """Set it to stop the operator gracefully."""
        self.api: APIClient | None = None
        self.context: OperatorContext | None = None
        """The running operator's shared state (for introspection and test kits)."""
        self.orchestration: Orchestration | None = None

    def stop(self) -> None:
        self.stop_flag.set()

    async def main(self) -> None:
        """Run until stopped; raise if startup fails (before any watching starts)."""
        settings = self.settings
        context = OperatorContext(
            api=None,  # type: ignore[arg-type]  # set below, once credentials exist
            registry=self.registry,
            settings=settings,
            memo=self.memo,
            thread_limiter=make_limiter(settings.execution.max_workers),
        )
        context.reset_basetime()
        self.context = context
        execution = Execution(
            now=context.now,
            default_backoff=settings.execution.default_backoff,
            limiter=context.thread_limiter,
        )

        # k8s Events: from here on, trioperator.event() & co. (in this task, the tasks it
        # starts, and their threads) queue to this operator; the poster posts them once the API
        # is reachable (so even startup handlers may post).
        send_events, receive_events = open_poster_channel()
        with install_poster(send_events, settings=settings):
            await self._run_activity(Activity.STARTUP, execution)
            # Startup handlers may have changed the settings (e.g. max_workers).
            context.thread_limiter.total_tokens = (
                settings.execution.max_workers or DEFAULT_THREAD_LIMIT
            )
            execution.default_backoff = settings.execution.default_backoff

            try:
                async with trio.open_nursery() as root:
                    if self.handle_signals:
                        await root.start(_watch_signals, self.stop_flag, root.cancel_scope)
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
                            )
                        )
                    await root.start(self._run_authenticator, execution)
                    api = self.api = context.api = APIClient(self.vault, settings.networking)
                    try:
                        async with trio.open_nursery() as posting:
                            await posting.start(
                                partial(
                                    run_poster,
                                    api,
                                    settings=settings,
                                    receive=receive_events,
                                    default_namespace=self._default_namespace(),
                                )
                            )
                            try:
                                await self._serve(context)
                            finally:
                                # Nothing is handled any more: the poster posts what is queued
                                # (for a bounded time) and exits. If serving failed, the
                                # nursery cancels the poster at once instead.
                                send_events.close()
                    finally:
                        root.cancel_scope.cancel()
            finally:
                try:
                    with trio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                        await self._run_activity(Activity.CLEANUP, execution)
                finally:
                    if self.api is not None:
                        with trio.CancelScope(shield=True):
                            await api.aclose()
                    self.vault.close()

    def _default_namespace(self) -> str | None:
        """Where events about cluster-scoped objects go: the credentials' namespace, if any."""
        for _, info in self.vault.items():
            if info.default_namespace:
                return info.default_namespace
        return None

    async def _serve(self, context: OperatorContext) -> None:
        assert self.api is not None
        async with trio.open_nursery() as serving:
            serving.start_soon(_stop_on_flag, self.stop_flag, context.stopping)
            # The orchestrator starts every initial watcher in one synchronous step; each takes
            # the indexing gate before its first checkpoint, so nothing runs before indexing.
            self.orchestration = await serving.start(
                partial(
                    run_orchestrator,
                    context,
                    api=self.api,
                    registry=self.registry,
                    settings=context.settings,
                    namespaces_patterns=self.namespaces,
                    clusterwide=self.clusterwide,
                    health=self.watchers_health,
                )
            )
            self.ready_flag.set()
            logger.info(f"The operator is ready: serving {len(self.served)} resource(s).")
            await context.stopping.wait()
            logger.info("Stop requested; finishing the work in progress.")

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
        while True:
            if not self.vault.is_empty():
                # Given credentials (embedding, tests) or a successful re-login: nothing to do.
                if not reported:
                    reported = True
                    logger.info("Client is configured.")
                    task_status.started()
                await self.vault.wait_for_emptiness()
                continue
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
                logger.error(f"Login failed: {exc}")
            infos = {
                str(hid): outcome.result
                for hid, outcome in outcomes.items()
                if isinstance(outcome.result, ConnectionInfo)
            }
            if infos:
                await self.vault.populate(infos)
            if self.vault.is_empty():
                error = LoginError("Ran out of valid credentials: no login handler gave any.")
                self.vault.fail(error)
                if not reported:
                    raise error
                # Wait for the next request for credentials instead of retrying in a loop.
                await self.vault.wait_for_emptiness()


def _fallback_login_handlers() -> list[ActivityHandler]:
    return [
        ActivityHandler(
            fn=fn,
            id=HandlerId(fn.__name__),
            activity=Activity.AUTHENTICATION,
            errors=ErrorsMode.IGNORED,
        )
        for fn in (login_with_service_account, login_with_kubeconfig)
    ]


async def _stop_on_flag(stop_flag: trio.Event, stopping: trio.Event) -> None:
    await stop_flag.wait()
    stopping.set()


async def _watch_signals(
    stop_flag: trio.Event,
    root: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """First SIGINT/SIGTERM: graceful stop. Second: cancel everything now."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if stop_flag.is_set():
                logger.warning(f"Signal {signal.Signals(signum).name} again: cancelling now.")
                root.cancel()
                return
            logger.info(f"Signal {signal.Signals(signum).name} received: stopping gracefully.")
            stop_flag.set()
