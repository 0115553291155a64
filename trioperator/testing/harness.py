"""An operator running inside the test's own trio run, against the fake Kubernetes API.

No threads, no real sleeps: the operator is a task in a nursery that the test's ``async with``
opens, and every wait polls a condition on trio's clock, so trio's ``MockClock`` (pytest-trio's
``autojump_clock``) makes time-based behaviour fast and exact::

    async def test_creation(autojump_clock):
        async with run_operator(registry=registry, crds=["crd.yaml"]) as operator:
            operator.api.create_object("kopfexamples", body, namespace="default")
            obj = await operator.wait_for_object(
                "kopfexamples", "kopf-example-1", "default",
                lambda obj: obj["status"]["create_fn"]["message"] == "hello",
            )
        operator.assert_logged(r"Handler 'create_fn' succeeded")

Why polling and not events: while a sync handler runs in a worker thread, an autojumping clock
sees every task blocked and jumps to the nearest deadline. A poll holds the clock still for a
few real milliseconds while a thread runs, then sleeps a short interval, so a wait's own
timeout is not reached in one jump while the thread is still working, and mock time still
passes while a thread blocks on purpose (``_clockhold.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, final

import trio

from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.registry import (
    OperatorRegistry,
    get_default_registry,
)
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.loggers import object_prefix
from trioperator._runtime.program.loading import load_operator_code
from trioperator._runtime.program.operator import Operator
from trioperator._runtime.program.options import OperatorOptions
from trioperator.testing._clockhold import ClockHold, threads_busy
from trioperator.testing.cluster import ClusterObjects
from trioperator.testing.controlplane import CRDSource, RealControlPlane, load_crds
from trioperator.testing.fakeapi import FakeAPI

__all__ = [
    "CapturedLogs",
    "OperatorHarness",
    "OperatorRunner",
    "OperatorStoppedError",
    "load_registry",
    "run_operator",
]

T = TypeVar("T")
Obj = dict[str, Any]
Pattern = str | re.Pattern[str]

DEFAULT_TIMEOUT = 60.0
"""Seconds of trio time for readiness, waits and a graceful stop, unless told otherwise."""

POLL_INTERVAL = 0.01
"""Seconds of trio time between two checks of a waited-for condition."""

REAL_SERVER_POLL_INTERVAL = 0.1
"""Seconds between two reads of an object from a real API server, at the least."""


class OperatorStoppedError(Exception):
    """The operator stopped (or failed) while a test was waiting for it to do something.

    The operator's own error, if any, is the ``__cause__``.
    """


# ------------------------------------------------------------------------------ captured logs


def line_of(record: logging.LogRecord) -> str:
    """The message of a record as the log line shows it: an object's begins with its prefix."""
    message = record.getMessage()
    ref = getattr(record, "k8s_ref", None)
    return f"{object_prefix(ref)} {message}" if ref is not None else message


@final
class CapturedLogs(logging.Handler):
    """The log records of the operator (the ``trioperator`` loggers), in the order logged.

    Patterns are regular expressions searched for in each message as the log line shows it
    (``re.search``): with its arguments, and for a record about an object with the object's
    ``[namespace/name]`` before it, as in ``[default/kex-1] Handler 'create_fn' succeeded.``
    Each record also keeps the trio time it was logged at (``None`` if it was logged from a
    worker thread), so tests on a mock clock can assert when something happened.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.NOTSET)
        self.records: list[logging.LogRecord] = []
        self._times: list[float | None] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            now: float | None = trio.current_time()
        except RuntimeError:  # a sync handler logging from its worker thread
            now = None
        # Appends only, under the handler's lock: readers take snapshots.
        self.records.append(record)
        self._times.append(now)

    @property
    def messages(self) -> list[str]:
        """The messages of all captured records, formatted with their arguments."""
        return [line_of(record) for record in list(self.records)]

    @property
    def text(self) -> str:
        """All messages, one per line."""
        return "\n".join(self.messages)

    def clear(self) -> None:
        self.acquire()
        try:
            self.records.clear()
            self._times.clear()
        finally:
            self.release()

    def find(self, pattern: Pattern, *, level: int = logging.NOTSET) -> list[logging.LogRecord]:
        """The records at ``level`` or above whose message matches ``pattern``."""
        regex = re.compile(pattern)
        return [
            record
            for record in list(self.records)
            if record.levelno >= level and regex.search(line_of(record))
        ]

    def count(self, pattern: Pattern, *, level: int = logging.NOTSET) -> int:
        return len(self.find(pattern, level=level))

    def times(self, pattern: Pattern) -> list[float | None]:
        """The trio times at which the matching messages were logged."""
        regex = re.compile(pattern)
        pairs = list(zip(list(self.records), list(self._times), strict=False))
        return [when for record, when in pairs if regex.search(line_of(record))]

    def assert_logged(
        self, pattern: Pattern, *, level: int = logging.NOTSET, count: int | None = None
    ) -> None:
        """Some message matches (exactly ``count`` of them, if given)."""
        found = self.count(pattern, level=level)
        if count is None and found == 0:
            raise AssertionError(f"Nothing logged matches {_show(pattern)}.{self._dump()}")
        if count is not None and found != count:
            raise AssertionError(
                f"{found} messages match {_show(pattern)}, expected {count}.{self._dump()}"
            )

    def assert_not_logged(self, pattern: Pattern, *, level: int = logging.NOTSET) -> None:
        found = self.find(pattern, level=level)
        if found:
            raise AssertionError(f"Logged, but should not be: {line_of(found[0])!r}.{self._dump()}")

    def assert_in_order(self, *patterns: Pattern) -> None:
        """Each pattern matches a message logged after the one the previous pattern matched."""
        messages = self.messages
        position = 0
        for pattern in patterns:
            regex = re.compile(pattern)
            for index in range(position, len(messages)):
                if regex.search(messages[index]):
                    position = index + 1
                    break
            else:
                raise AssertionError(
                    f"Nothing matches {_show(pattern)} after the previous patterns.{self._dump()}"
                )

    def _dump(self, limit: int = 60) -> str:
        """The last messages, for assertion errors."""
        messages = self.messages
        lines = ["", "Captured messages:"]
        if len(messages) > limit:
            lines.append(f"  ... {len(messages) - limit} earlier ones")
        lines.extend(f"  {message}" for message in messages[-limit:])
        return "\n".join(lines)


def _show(pattern: Pattern) -> str:
    return repr(pattern.pattern if isinstance(pattern, re.Pattern) else pattern)


@contextlib.contextmanager
def _capturing(handler: CapturedLogs, level: int, name: str = "trioperator") -> Iterator[None]:
    """Attach ``handler`` to a logger and let records down to ``level`` through, temporarily.

    Child loggers with a stricter level of their own (e.g. set by the CLI's logging setup) are
    relaxed too; every level is restored afterwards.
    """
    root = logging.getLogger(name)
    saved = {root: root.level}
    for other_name, other in list(logging.Logger.manager.loggerDict.items()):
        if (
            isinstance(other, logging.Logger)
            and other_name.startswith(name + ".")
            and other.level > level
        ):
            saved[other] = other.level
            other.setLevel(logging.NOTSET)
    root.setLevel(level)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        for logger, old_level in saved.items():
            logger.setLevel(old_level)


# ------------------------------------------------------------------------------ the harness


@final
class OperatorHarness:
    """Runs an :class:`~trioperator.Operator` in the test's nursery against a :class:`FakeAPI`,
    or against a real API server (``server=``, a running :class:`RealControlPlane`).

    Use it as ``async with`` (or through :func:`run_operator`); entering starts the fake API (if
    none is given), creates the given CRDs in it, starts the operator, and returns once the
    operator is ready (its watchers have listed what exists). Leaving the block stops the
    operator gracefully, as a SIGTERM would, waits up to ``stop_timeout`` for it to finish
    (then cancels it), and stops the fake API if the harness started it.

    Failures, with ``reraise=True`` (the default): a failure before readiness (e.g. a startup
    handler's) is raised from ``async with`` itself; a failure later cancels the block's body
    and is raised when the block exits. The error is the operator's own, not wrapped in an
    ``ExceptionGroup``, so ``pytest.raises(kopf.ActivityError)`` works. An error of the body
    itself takes precedence; the operator's is then added to it as a note.

    With ``reraise=False`` nothing is raised for the operator: the body runs even if startup
    failed, and looks at :attr:`exception`. Waits fail fast with :class:`OperatorStoppedError`
    once the operator has stopped.
    """

    def __init__(
        self,
        *,
        registry: OperatorRegistry | None = None,
        settings: OperatorSettings | None = None,
        api: FakeAPI | None = None,
        server: RealControlPlane | None = None,
        memo: Any = None,
        namespaces: Iterable[str] = (),
        clusterwide: bool | None = None,
        crds: Iterable[CRDSource] = (),
        reraise: bool = True,
        ready_timeout: float = DEFAULT_TIMEOUT,
        stop_timeout: float = DEFAULT_TIMEOUT,
        wait_timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = POLL_INTERVAL,
        log_level: int = logging.DEBUG,
        metrics_endpoint: str | None = None,
    ) -> None:
        """
        :param registry: the handlers; by default the default registry, i.e. whatever the
            test's imports decorated (see also :func:`load_registry`).
        :param api: a fake API already serving (e.g. the ``fake_api`` fixture); by default the
            harness serves a new one for the duration of the block.
        :param server: instead of a fake API, a running :class:`RealControlPlane` (e.g. the
            ``real_control_plane`` fixture): the operator talks to its kube-apiserver, the
            CRDs are installed there, and :attr:`cluster` reads and writes its objects. Use
            real time there (no mock clock), and a namespace of the test's own.
        :param namespaces: serve only these namespaces (patterns as on the command line).
        :param clusterwide: serve the whole cluster; by default, when no namespaces are given.
        :param crds: CustomResourceDefinitions to create before the operator starts (it finds
            its resources at startup): bodies, or paths of YAML files with one or more CRDs.
            On a real server they are applied and awaited until established.
        :param log_level: capture the operator's records down to this level (see :attr:`logs`).
        :param metrics_endpoint: serve the operator's metrics there, e.g.
            ``http://127.0.0.1:0/metrics`` (port 0: any free one; see :attr:`metrics_url`).
            They are collected anyway: ``operator.metrics.render()``.
        """
        self.registry = registry if registry is not None else get_default_registry()
        self.settings = settings if settings is not None else OperatorSettings()
        namespaces = tuple(namespaces)
        self.options = OperatorOptions(
            registry=self.registry,
            settings=self.settings,
            memo=memo,
            namespaces=namespaces,
            clusterwide=not namespaces if clusterwide is None else clusterwide,
            handle_signals=False,
            metrics_endpoint=metrics_endpoint,
        )
        """What the operator under test runs with (its credentials are added as it starts)."""
        self.reraise = reraise
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.log_level = log_level
        self.logs = CapturedLogs()
        """What the operator logged (the ``trioperator`` loggers), live."""
        self.exception: Exception | None = None
        """Why the operator stopped, if it failed; ``None`` while running or after a clean stop."""
        if api is not None and server is not None:
            raise ValueError("Either api= (a fake API) or server= (a real one), not both.")
        self._api = api
        self._server = server
        self._cluster: ClusterObjects | None = None
        self._crds = list(crds)
        self._operator: Operator | None = None
        self._finished = trio.Event()
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._body_scope: trio.CancelScope | None = None

    def __repr__(self) -> str:
        state = (
            "not started"
            if self._operator is None
            else f"failed: {self.exception!r}"
            if self.exception is not None
            else "stopped"
            if self.finished
            else "ready"
            if self.ready
            else "starting"
        )
        return f"<{type(self).__name__} {state}>"

    # -------------------------------------------------------------------------- state

    @property
    def api(self) -> FakeAPI:
        """The fake Kubernetes API the operator talks to."""
        if self._server is not None:
            raise RuntimeError(
                "The operator runs against a real API server: use `operator.cluster`."
            )
        if self._api is None:
            raise RuntimeError("The fake API is served once the harness is entered.")
        return self._api

    @property
    def cluster(self) -> ClusterObjects:
        """The objects of the real API server the operator talks to (``server=``), async."""
        if self._server is None:
            raise RuntimeError("The operator runs against a fake API: use `operator.api`.")
        if self._cluster is None:
            raise RuntimeError("The real API server is reachable once the harness is entered.")
        return self._cluster

    @property
    def operator(self) -> Operator:
        """The operator itself (its ``memo``, ``settings``, ``ready_flag``, ``stop_flag``...)."""
        if self._operator is None:
            raise RuntimeError("The operator exists once the harness is entered.")
        return self._operator

    @property
    def metrics_url(self) -> str:
        """The URL of the metrics endpoint as served (with the port it is bound to)."""
        endpoint = self.options.metrics_endpoint
        if endpoint is None or self.operator.metrics_port is None:
            raise RuntimeError("The metrics are served only with metrics_endpoint=..., once ready.")
        parts = urllib.parse.urlsplit(endpoint)
        host = parts.hostname or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        netloc = f"[{host}]" if ":" in host else host
        return f"http://{netloc}:{self.operator.metrics_port}{parts.path or '/'}"

    @property
    def ready(self) -> bool:
        return self._operator is not None and self._operator.ready_flag.is_set()

    @property
    def finished(self) -> bool:
        """Whether ``Operator.main`` has returned or raised."""
        return self._finished.is_set()

    # -------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> OperatorHarness:
        if self._stack is not None:
            raise RuntimeError("An OperatorHarness runs once; make a new one to run again.")
        self._stack = stack = contextlib.AsyncExitStack()
        try:
            if self._server is not None:
                info = await self._enter_real_server(self._server, stack)
            else:
                info = await self._enter_fake_api(stack)
            stack.enter_context(_capturing(self.logs, self.log_level))
            vault = Vault({"fake-api" if self._server is None else "real-server": info})
            self._operator = Operator.from_options(dataclasses.replace(self.options, vault=vault))
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            self._nursery.start_soon(self._main, name="operator under test")
            await self._poll(
                lambda: self.ready or self.finished,
                limit=self.ready_timeout,
                describe=lambda: "the operator to become ready",
                fail_if_stopped=False,
            )
        except BaseException:
            await self._shutdown()
            raise
        if self.finished and self.reraise:
            await self._shutdown()
            if self.exception is not None:
                raise self.exception
            raise OperatorStoppedError("The operator stopped before it was ready.")
        # The body runs in a scope of its own, so that a failing operator can interrupt it
        # without the body's own errors passing through the nursery (and into a group).
        self._body_scope = trio.CancelScope()
        self._body_scope.__enter__()
        return self

    async def _enter_fake_api(self, stack: contextlib.AsyncExitStack) -> ConnectionInfo:
        if self._api is None:
            self._api = await stack.enter_async_context(FakeAPI.serve())
        api = self._api
        for source in self._crds:
            for crd in load_crds(source):
                api.create_object("customresourcedefinitions", crd)
        token = min(api.tokens) if api.tokens else "fake-token"
        return ConnectionInfo(server=api.url, token=token)

    async def _enter_real_server(
        self, server: RealControlPlane, stack: contextlib.AsyncExitStack
    ) -> ConnectionInfo:
        info = ConnectionInfo(server=server.url, token=server.token, ca_path=str(server.ca_path))
        if self._crds:
            # The control plane's requests are blocking (it serves sync session fixtures too).
            crds = self._crds
            await trio.to_thread.run_sync(
                lambda: server.install_crds(crds, timeout=self.ready_timeout)
            )
        client = APIClient(Vault({"real-server": info}), self.settings.networking)
        await stack.enter_async_context(client)
        self._cluster = ClusterObjects(client)
        return info

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        body_error = self._exit_body_scope(exc_type, exc, tb)
        stopped_in_time = await self._shutdown()
        not_stopped = (
            None
            if stopped_in_time
            else trio.TooSlowError(
                f"The operator did not stop within {self.stop_timeout}s after the stop "
                f"request, and was cancelled."
            )
        )
        if body_error is not None:
            if self.exception is not None:
                body_error.add_note(f"The operator has failed too: {self.exception!r}")
            if not_stopped is not None:
                body_error.add_note(str(not_stopped))
            if body_error is exc:
                return False
            raise body_error
        if self.exception is not None and self.reraise:
            raise self.exception
        if not_stopped is not None:
            raise not_stopped
        # Only our own cancellation of the body (after a failure) can be swallowed here.
        return exc is not None

    def _exit_body_scope(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> BaseException | None:
        """Close the body's scope; return the body's error, minus our own cancellation."""
        scope, self._body_scope = self._body_scope, None
        if scope is None:
            return exc
        try:
            swallowed = scope.__exit__(exc_type, exc, tb)
        except BaseException as remaining:  # a group, without the cancellation we caused
            return remaining
        return None if swallowed else exc

    async def _main(self) -> None:
        try:
            await self.operator.main()
        except Exception as exc:
            self.exception = _single(exc)
            if self.reraise and self._body_scope is not None:
                self._body_scope.cancel()
        finally:
            self._finished.set()

    async def _shutdown(self) -> bool:
        """Stop gracefully, cancel what is left after ``stop_timeout``, close the rest.

        Returns whether the operator stopped within the time.
        """
        stopped_in_time = True
        try:
            if self._nursery is not None and not self.finished:
                self.operator.stop()
                with trio.move_on_after(self.stop_timeout) as deadline:
                    await self._poll_finished()
                stopped_in_time = not deadline.cancelled_caught
        finally:
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
            if self._stack is not None:
                await self._stack.aclose()
        return stopped_in_time

    async def _poll_finished(self) -> None:
        while not self.finished:  # noqa: ASYNC110 -- see the module's docstring on polling
            await trio.sleep(self.poll_interval)

    # -------------------------------------------------------------------------- control

    def stop(self) -> None:
        """Request a graceful stop, as SIGTERM would; ``await stopped()`` to wait for it."""
        self.operator.stop()

    async def stopped(self, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until the operator has finished; its error, if any, is in :attr:`exception`."""
        await self._poll(
            self._finished.is_set,
            limit=self.stop_timeout if timeout is None else timeout,
            describe=lambda: "the operator to stop",
            fail_if_stopped=False,
        )

    # -------------------------------------------------------------------------- waiting

    async def wait_for(
        self,
        predicate: Callable[[], T],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 -- a default limit, see the docstring
        what: str | None = None,
    ) -> T:
        """Check ``predicate()`` every ``poll_interval`` until it is truthy; return its value.

        A ``LookupError`` (``KeyError``, ``IndexError``) from the predicate counts as "not yet",
        so it can reach into bodies that do not have the field yet. Raises
        :class:`OperatorStoppedError` if the operator has stopped meanwhile, and
        ``trio.TooSlowError`` with what was awaited after ``timeout`` seconds of trio time
        (``wait_timeout`` by default): a limit so that a broken test fails with a message
        instead of hanging. Outer ``trio.fail_after`` scopes work as usual.
        """
        return await self._poll(
            predicate,
            limit=self.wait_timeout if timeout is None else timeout,
            describe=lambda: what or _describe(predicate),
        )

    async def wait_for_object(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        predicate: Callable[[Obj], object] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 -- as in wait_for
    ) -> Obj:
        """Wait until the object exists (and ``predicate(obj)`` is truthy); return its body.

        ``resource`` is as in :meth:`FakeAPI.get_object`: a plural (``"kopfexamples"``), or
        ``plural.group`` when ambiguous. Against a real server, the object is read from it.
        """
        limit = self.wait_timeout if timeout is None else timeout
        if self._server is not None:
            return await self._wait_for_real_object(resource, name, namespace, predicate, limit)

        def check() -> Obj | None:
            obj = self.api.get_object(resource, name, namespace)
            return obj if predicate is None or predicate(obj) else None

        def describe() -> str:
            where = f"{resource} {namespace + '/' if namespace else ''}{name}"
            wanted = "to exist" if predicate is None else f"to satisfy {_describe(predicate)}"
            try:
                now = f"it is now: {self.api.get_object(resource, name, namespace)!r}"
            except KeyError:
                now = "it does not exist"
            return f"{where} {wanted}; {now}"

        return await self._poll(check, limit=limit, describe=describe)

    async def _wait_for_real_object(
        self,
        resource: str,
        name: str,
        namespace: str | None,
        predicate: Callable[[Obj], object] | None,
        limit: float,
    ) -> Obj:
        cluster = self.cluster
        seen: list[Obj] = []

        async def check() -> Obj | None:
            obj = await cluster.get(resource, name, namespace)
            seen[:] = [obj]
            return obj if predicate is None or predicate(obj) else None

        def describe() -> str:
            where = f"{resource} {namespace + '/' if namespace else ''}{name}"
            wanted = "to exist" if predicate is None else f"to satisfy {_describe(predicate)}"
            now = f"it was last: {seen[0]!r}" if seen else "it was not seen"
            return f"{where} {wanted}; {now}"

        return await self._poll_async(
            check,
            limit=limit,
            describe=describe,
            interval=max(self.poll_interval, REAL_SERVER_POLL_INTERVAL),
        )

    async def wait_for_deletion(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 -- as in wait_for
    ) -> None:
        """Wait until the object is gone (e.g. once the operator has removed its finalizer)."""
        if self._server is not None:
            cluster = self.cluster

            async def gone() -> bool:
                return not await cluster.exists(resource, name, namespace)

            where = f"{resource} {namespace + '/' if namespace else ''}{name}"
            await self._poll_async(
                gone,
                limit=self.wait_timeout if timeout is None else timeout,
                describe=lambda: f"{where} to be deleted",
                interval=max(self.poll_interval, REAL_SERVER_POLL_INTERVAL),
            )
            return

        def describe() -> str:
            where = f"{resource} {namespace + '/' if namespace else ''}{name}"
            try:
                obj = self.api.get_object(resource, name, namespace)
            except KeyError:
                return f"{where} to be deleted"
            return f"{where} to be deleted; it is now: {obj!r}"

        await self._poll(
            lambda: not self.api.has_object(resource, name, namespace),
            limit=self.wait_timeout if timeout is None else timeout,
            describe=describe,
        )

    async def wait_for_log(
        self,
        pattern: Pattern,
        *,
        count: int = 1,
        level: int = logging.NOTSET,
        timeout: float | None = None,  # noqa: ASYNC109 -- as in wait_for
    ) -> logging.LogRecord:
        """Wait until ``count`` messages match ``pattern``; return the last of those records."""

        def check() -> logging.LogRecord | None:
            found = self.logs.find(pattern, level=level)
            return found[count - 1] if len(found) >= count else None

        return await self._poll(
            check,
            limit=self.wait_timeout if timeout is None else timeout,
            describe=lambda: (
                f"{count} message(s) matching {_show(pattern)}, "
                f"got {self.logs.count(pattern, level=level)}{self.logs._dump()}"
            ),
        )

    # -------------------------------------------------------------------------- assertions

    def assert_logged(
        self, pattern: Pattern, *, level: int = logging.NOTSET, count: int | None = None
    ) -> None:
        """Shortcut for :meth:`CapturedLogs.assert_logged` on :attr:`logs`."""
        self.logs.assert_logged(pattern, level=level, count=count)

    def assert_not_logged(self, pattern: Pattern, *, level: int = logging.NOTSET) -> None:
        self.logs.assert_not_logged(pattern, level=level)

    # -------------------------------------------------------------------------- internals

    def _threads_busy(self) -> bool:
        context = getattr(self.operator, "context", None)
        return threads_busy(getattr(context, "thread_limiter", None))

    async def _poll(
        self,
        check: Callable[[], T | None],
        *,
        limit: float,
        describe: Callable[[], str],
        fail_if_stopped: bool = True,
    ) -> T:
        async def checked() -> T | None:
            return check()

        return await self._poll_async(
            checked, limit=limit, describe=describe, fail_if_stopped=fail_if_stopped
        )

    async def _poll_async(
        self,
        check: Callable[[], Awaitable[T | None]],
        *,
        limit: float,
        describe: Callable[[], str],
        fail_if_stopped: bool = True,
        interval: float | None = None,
    ) -> T:
        interval = self.poll_interval if interval is None else interval
        # A sync handler works in real time; an idle mock clock would jump ahead meanwhile
        # (timeouts firing early), so each poll holds it still for a few real milliseconds
        # while a thread runs (see _clockhold.py). Against a real server, time is real and
        # each check is a request: plain sleeps.
        hold = ClockHold(self._threads_busy) if self._server is None else None
        last_error: LookupError | None = None
        with trio.move_on_after(limit):
            while True:
                try:
                    value = await check()
                except LookupError as error:
                    last_error = error
                else:
                    if value:
                        return value
                if fail_if_stopped and self.finished:
                    raise OperatorStoppedError(
                        f"The operator has stopped while waiting for {describe()}"
                    ) from self.exception
                if hold is not None:
                    await hold.pause(interval)
                else:
                    await trio.sleep(interval)
        message = f"Waited {limit}s (trio time) in vain for {describe()}"
        if last_error is not None:
            message += f"\nThe last lookup failed with: {last_error!r}"
        raise trio.TooSlowError(message)


OperatorRunner = Callable[..., OperatorHarness]
"""The type of the pytest plugin's ``operator_runner`` fixture: ``run_operator`` bound to an API."""


def run_operator(
    *,
    registry: OperatorRegistry | None = None,
    settings: OperatorSettings | None = None,
    api: FakeAPI | None = None,
    server: RealControlPlane | None = None,
    memo: Any = None,
    namespaces: Iterable[str] = (),
    clusterwide: bool | None = None,
    crds: Iterable[CRDSource] = (),
    reraise: bool = True,
    ready_timeout: float = DEFAULT_TIMEOUT,
    stop_timeout: float = DEFAULT_TIMEOUT,
    wait_timeout: float = DEFAULT_TIMEOUT,
    poll_interval: float = POLL_INTERVAL,
    log_level: int = logging.DEBUG,
    metrics_endpoint: str | None = None,
) -> OperatorHarness:
    """``async with run_operator(...) as operator:`` runs an operator for the block's duration.

    See :class:`OperatorHarness` for the arguments and the behaviour.
    """
    return OperatorHarness(
        registry=registry,
        settings=settings,
        api=api,
        server=server,
        memo=memo,
        namespaces=namespaces,
        clusterwide=clusterwide,
        crds=crds,
        reraise=reraise,
        ready_timeout=ready_timeout,
        stop_timeout=stop_timeout,
        wait_timeout=wait_timeout,
        poll_interval=poll_interval,
        log_level=log_level,
        metrics_endpoint=metrics_endpoint,
    )


# ------------------------------------------------------------------------------ helpers


def load_registry(*paths: str | os.PathLike[str], modules: Iterable[str] = ()) -> OperatorRegistry:
    """A new registry with the handlers of an operator's files and modules.

    The code is executed afresh on every call (the files with ``runpy.run_path``, the modules
    with ``runpy.run_module``) while the new registry is the default one, so the decorators of
    ``import trioperator as kopf`` code land in it, and every test gets its own handlers.
    Decorators with an explicit ``registry=`` register where they say. As with
    ``trioperator run``, a file's directory is added to ``sys.path`` for its sibling imports.
    """
    registry = OperatorRegistry()
    load_operator_code(paths, modules, registry=registry, fresh=True)
    return registry


def _single(exc: Exception) -> Exception:
    """The only error inside nested one-error groups, as a public boundary should raise it."""
    while (
        isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1
    ):  # the nursery tree may wrap a single failure several times
        exc = exc.exceptions[0]
    return exc


def _describe(fn: Callable[..., object]) -> str:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    if name.endswith("<lambda>") and code is not None:
        return f"a lambda at {Path(code.co_filename).name}:{code.co_firstlineno}"
    return name
