"""The listening loop behind the webhook servers of ``trioperator._kits.webhooks``.

The kits decide *what* to serve (TLS or plain HTTP, which certificate, which CA bundle to
advertise, which public host name); this module does the serving, because serving needs a
nursery and only the runtime opens nurseries:

* it binds ``addr:port`` (a free port is picked once when none is given, and kept across
  restarts so that the advertised URL does not change),
* answers ``POST <path>/<webhook id>`` by calling the operator's ``WebhookFn``,
* sends a ``WebhookClientConfig`` into ``configs`` when it starts and after every restart,
* restarts the listener when the watched certificate files change on disk (polled on
  trio's clock, so tests drive it with a mock clock). A renewed set of files that cannot be
  loaded (e.g. a certificate rewritten before its key) is not used: the previous listener keeps
  serving until the files are consistent again. The reviews in flight on the previous
  listener's connections are answered (within a grace period), not cut.

``serve_translated`` and ``serve_relayed`` run such a server behind a tunnel: they advertise the
tunnel's address instead of the local one, and follow the local server's restarts.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import hashlib
import ipaddress
import os
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from functools import partial
from typing import Final, TypeAlias

import msgspec
import trio

from trioperator._client.api import APIClient
from trioperator._engine.settings import ServingSettings
from trioperator._engine.webhooks import (
    TrioWebhookServer,
    WebhookClientConfig,
    WebhookClientConfigService,
    WebhookFn,
    WebhookRejected,
)
from trioperator._runtime.support.httpserver import Handler, Request, Response, serve_http
from trioperator._util.lognames import framework_logger

__all__ = [
    "RETIRED_GRACE",
    "ConfigRelay",
    "ConfigTranslator",
    "ServingSetup",
    "SetupBuilder",
    "StrPath",
    "build_url",
    "serve_relayed",
    "serve_translated",
    "ServerSupport",
    "current_support",
    "providing",
    "serve_webhooks",
]

logger = framework_logger("kopf._kits.webhooks", "trioperator.webhooks")


@dataclasses.dataclass(frozen=True)
class ServerSupport:
    """What an operator gives the webhook servers it serves: they are built by the user, with
    no access to the operator, and reach this through :func:`current_support` in their tasks."""

    api: APIClient | None = None
    """The operator's API client, for servers that keep state in the cluster (e.g. the CA that
    the replicas of a ``WebhookServiceServer`` share in a Secret): with the operator's
    credentials, retries and metrics. ``None`` for a server run outside of an operator."""

    limits: ServingSettings = dataclasses.field(default_factory=ServingSettings)
    """The limits of the connections (the operator's ``settings.serving``)."""


_support: contextvars.ContextVar[ServerSupport] = contextvars.ContextVar(
    "trioperator.webhook_serving.support"
)


def current_support() -> ServerSupport:
    """What the operator serving this task's webhook server gives it (defaults outside one)."""
    return _support.get(None) or ServerSupport()


@contextlib.contextmanager
def providing(support: ServerSupport) -> Iterator[None]:
    """Make ``support`` the :func:`current_support` of this task and of the tasks it starts."""
    token = _support.set(support)
    try:
        yield
    finally:
        _support.reset(token)


StrPath: TypeAlias = str | os.PathLike[str]
"""A file name as ``open()`` takes it (the certificate, key and CA files)."""

RETIRED_GRACE: Final = 30.0
"""Seconds that connections of a restarted listener keep serving the reviews in flight: the
API server waits for a webhook at most 30 seconds (``timeoutSeconds``' maximum)."""


@dataclasses.dataclass(frozen=True)
class ServingSetup:
    """What one incarnation of a listener serves with."""

    context: ssl.SSLContext | None
    """The server's TLS context; ``None`` serves plain HTTP."""
    cadata: bytes | None
    """The PEM CA bundle advertised to the API server (``caBundle``), if any."""


SetupBuilder: TypeAlias = Callable[[], ServingSetup]
"""Builds the setup from the current files; blocking (it runs in a worker thread)."""


def build_url(scheme: str, host: str, port: int, path: str) -> str:
    """The URL of a listener: IPv6 literals bracketed, the scheme's default port omitted."""
    try:
        host = f"[{ipaddress.IPv6Address(host)}]"
    except ValueError:
        pass
    default = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
    netloc = host if default else f"{host}:{port}"
    return urllib.parse.urlunsplit((scheme, netloc, path, "", ""))


async def serve_webhooks(
    fn: WebhookFn,
    *,
    build: SetupBuilder,
    addr: str | None,
    port: int | None,
    path: str,
    host: str,
    configs: trio.MemorySendChannel[WebhookClientConfig],
    watched: Sequence[StrPath] = (),
    check_interval: float = 60.0,
    grace: float = RETIRED_GRACE,
    service: WebhookClientConfigService | None = None,
    limits: ServingSettings | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve admission reviews until cancelled (see the module's docstring).

    With ``service``, the API server is told to reach the webhooks through that in-cluster
    Service (e.g. ``{"namespace": "ns", "name": "hooks", "port": 443, "path": "/x"}``) instead
    of the URL of this listener.

    ``limits`` bound the connections (default: those of :func:`current_support`). ``addr``
    is the address to listen on (``None``: every interface), ``path`` the root path of the
    webhooks (``""`` or ``/a/b``, no trailing slash), ``host`` the name the API server reaches
    the listener by. Errors of the initial ``build`` (a missing file, a wrong password)
    propagate: the operator cannot serve with them. After a restart, the previous listener's
    connections have ``grace`` seconds to finish their reviews.
    """
    # The digest first: files renewed while the setup is built then count as a change.
    digest = await _digest(watched)
    setup = await trio.to_thread.run_sync(build)
    if not port:
        port = await _free_port(addr)
    handler = partial(_handle, fn, path)
    if limits is None:
        limits = current_support().limits
    started = False
    async with trio.open_nursery() as nursery:
        while True:
            generation = _Generation(
                handler, host=addr, port=port, context=setup.context, limits=limits
            )
            await nursery.start(generation.run, grace)
            scheme = "http" if setup.context is None else "https"
            url = build_url(scheme, host, port, path)
            logger.info(f"Serving admission webhooks at {url} (listening on {addr or '*'}:{port})")
            if service is not None:
                config = WebhookClientConfig(service=service)
                logger.info(f"The webhooks are advertised as the service {service}")
            else:
                config = WebhookClientConfig(url=url)
            if setup.cadata is not None:
                config["caBundle"] = base64.b64encode(setup.cadata).decode("ascii")
            if not started:
                started = True
                task_status.started()
            await configs.send(config)
            setup, digest = await _wait_for_renewal(build, watched, digest, check_interval)
            logger.info("Restarting the webhook server with the renewed certificate files.")
            await generation.retire()


class _Generation:
    """One listener with one TLS setup, and the connections it accepted.

    Retiring it stops the accepting at once (so that the next generation can bind the port)
    but lets the accepted connections finish the reviews in flight: they are cut only after
    the grace period. Idle keep-alive connections are cut then too; the API server reconnects,
    and gets the new certificate.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        host: str | None,
        port: int,
        context: ssl.SSLContext | None,
        limits: ServingSettings,
    ) -> None:
        self._serve = partial(
            serve_http, handler, host=host, port=port, ssl_context=context, limits=limits
        )
        self._accepting = trio.CancelScope()
        self._retired = trio.Event()
        self._not_accepting = trio.Event()

    async def run(self, grace: float, *, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as connections:
            await connections.start(self._accept, connections)
            task_status.started()
            await self._retired.wait()
            self._accepting.cancel()
            connections.cancel_scope.deadline = trio.current_time() + grace

    async def _accept(
        self, connections: trio.Nursery, *, task_status: trio.TaskStatus[None]
    ) -> None:
        try:
            with self._accepting:
                await self._serve(handler_nursery=connections, task_status=_Started(task_status))
        finally:
            self._not_accepting.set()

    async def retire(self) -> None:
        """Stop accepting (the listening socket is closed on return); let the rest finish."""
        self._retired.set()
        await self._not_accepting.wait()


class _Started:
    """Report a plain start to a status that does not want the listeners."""

    def __init__(self, status: trio.TaskStatus[None]) -> None:
        self._status = status

    def started(self, value: object = None) -> None:
        self._status.started()


async def _handle(fn: WebhookFn, root: str, request: Request) -> Response:
    if request.path != root and not request.path.startswith(f"{root}/"):
        return _error(404, f"No webhooks are served at {request.path}.")
    if request.method != "POST":
        response = _error(405, f"Admission reviews are POSTed, not sent with {request.method}.")
        response.headers["allow"] = "POST"
        return response
    # Kopf routes `<root>/<id>` with any id (sub-handler ids contain slashes); no id at all
    # means "every handler", which the operator decides about.
    webhook = urllib.parse.unquote(request.path[len(root) + 1 :]) or None
    try:
        review = await fn(
            request.body,
            webhook=webhook,
            headers=request.headers,
            sslpeer=request.peer or {},
        )
    except WebhookRejected as exc:
        # The operator's function has logged why (it knows the details); no second warning.
        logger.debug(f"Rejected a review for webhook {webhook!r}: {exc.message} ({exc.status})")
        return _error(exc.status, exc.message)
    except Exception:
        # One broken review must not stop the server: the API server gets a 500 and applies
        # the webhook's failure policy; the traceback goes to the log.
        logger.exception(f"Serving a review for webhook {webhook!r} failed.")
        return _error(500, "The operator failed to review the request; see its log.")
    return Response(200, msgspec.json.encode(review))


def _error(status: int, message: str) -> Response:
    return Response(status, message.encode("utf-8"), content_type="text/plain; charset=utf-8")


async def _free_port(addr: str | None) -> int:
    """A port that is free on ``addr`` now, picked once so that restarts keep the URL."""
    listeners = await trio.open_tcp_listeners(0, host=addr)
    try:
        port: int = listeners[0].socket.getsockname()[1]
        return port
    finally:
        # Closed without a checkpoint: a cancellation between two listeners (an operator
        # stopping while it starts) must not leave the second one open.
        for listener in listeners:
            listener.socket.close()


async def _wait_for_renewal(
    build: SetupBuilder,
    watched: Sequence[StrPath],
    digest: str,
    interval: float,
) -> tuple[ServingSetup, str]:
    """Sleep until the watched files change into something loadable; return the new setup."""
    if not watched:
        await trio.sleep_forever()
    refused: str | None = None
    while True:
        await trio.sleep(interval)
        try:
            current = await _digest(watched)
        except OSError as exc:
            # Mounted secrets are replaced by swapping symlinks; a file may be briefly absent.
            logger.debug(f"Certificate files are not readable at the moment: {exc}")
            continue
        if current == digest:
            continue
        try:
            setup = await trio.to_thread.run_sync(build)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            if current != refused:
                refused = current
                logger.error(
                    f"The renewed certificate files cannot be used ({exc}); "
                    f"serving with the previous ones until they change again."
                )
            continue
        return setup, current


async def _digest(paths: Sequence[StrPath]) -> str:
    # A content hash, not mtimes: files of mounted secrets keep odd mtimes, and the whole
    # content is tiny. Only the hash is kept, not the (secret) content.
    def read() -> str:
        hasher = hashlib.sha256()
        for path in paths:
            with open(path, "rb") as f:
                hasher.update(hashlib.sha256(f.read()).digest())
        return hasher.hexdigest()

    return await trio.to_thread.run_sync(read)


ConfigTranslator: TypeAlias = Callable[[WebhookClientConfig], Awaitable[WebhookClientConfig]]
"""Turns a local server's client config into the one to advertise (e.g. a tunnel's URL)."""

ConfigRelay: TypeAlias = Callable[
    [AsyncIterator[WebhookClientConfig]], AsyncIterator[WebhookClientConfig]
]
"""Turns the local server's stream of client configs into the stream to advertise."""


async def serve_translated(
    fn: WebhookFn,
    *,
    server: TrioWebhookServer,
    translate: ConfigTranslator,
    configs: trio.MemorySendChannel[WebhookClientConfig],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``server`` locally and advertise ``translate``'s version of each of its configs.

    This is the shape of a tunnel: the local endpoint changes (a restart after renewed
    certificates), the tunnel follows it and the operator re-points its webhooks.
    """

    async def relay(
        local: AsyncIterator[WebhookClientConfig],
    ) -> AsyncIterator[WebhookClientConfig]:
        async for config in local:
            yield await translate(config)

    await serve_relayed(fn, server=server, relay=relay, configs=configs, task_status=task_status)


async def serve_relayed(
    fn: WebhookFn,
    *,
    server: TrioWebhookServer,
    relay: ConfigRelay,
    configs: trio.MemorySendChannel[WebhookClientConfig],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``server`` locally; advertise what the ``relay`` generator makes of its configs.

    The relay is an async generator (e.g. Kopf's ``__call__`` of a tunnel that subclasses a
    server): it runs here, in this task, and opens no nursery across its ``yield``; the local
    server runs beside it in this function's nursery. The operator counts as started once the
    relay gave its first config.
    """
    send, receive = trio.open_memory_channel[WebhookClientConfig](0)
    async with trio.open_nursery() as nursery, receive:
        await nursery.start(partial(server.serve, fn, configs=send))
        started = False
        public_configs = relay(receive)
        try:
            async for public in public_configs:
                if not started:
                    started = True
                    task_status.started()
                await configs.send(public)
        finally:
            # Close a generator here and now (its cleanup, e.g. a tunnel's, belongs to this
            # task), not whenever the garbage collector finds it.
            aclose = getattr(public_configs, "aclose", None)
            if aclose is not None:
                await aclose()
        # A relay that ends gives no more configs; the last one stays valid while we serve.
        if not started:
            raise RuntimeError("The webhook server's relay ended without giving a client config.")
        await trio.sleep_forever()
