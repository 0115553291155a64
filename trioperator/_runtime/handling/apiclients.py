"""The API client for operator code, as a running operator gives it out (the ``api`` kwarg,
:func:`api_client`), and as scripts make it (:func:`connect_api`).

One operator has one async client, logged in through the operator's vault, and one sync client
for code in worker threads (through the same vault). Neither costs anything until used: making
them imports no HTTP library and opens no connection; httpx is imported and connections are
opened at the first request. They are closed when the operator ends, after the cleanup
handlers, in the operator's main task (see ``operator.py``).

Which one a caller gets follows how its code runs: trio code gets the async client; asyncio
code (asyncio-flavoured handlers) a view of it whose calls run in the operator's trio run,
where the vault lives (``asyncio_bridge.run_trio_from_asyncio``); sync handlers the sync one.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import sniffio
import trio

from trioperator._client.apiclient.asyncapi import AsyncAPI
from trioperator._client.apiclient.credentials import KnownCredentials, VaultFromThread
from trioperator._client.apiclient.lookup import Matching
from trioperator._client.apiclient.settings import ClientSettings
from trioperator._client.apiclient.syncapi import SyncAPI
from trioperator._client.config import load_kubeconfig
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.resources import Resource
from trioperator._engine.flavors import Flavor
from trioperator._engine.selectors import Selector
from trioperator._runtime.handling.asyncio_bridge import run_trio_from_asyncio

__all__ = [
    "OperatorAPIs",
    "api_client",
    "connect_api",
    "connect_sync_api",
    "match_resources",
    "serving_apis",
    "sync_api_client",
]

API_KWARG = "api"
"""The handlers' kwarg with the client (trioperator's own; Kopf has no such kwarg)."""


def match_resources(*names: str, **keywords: str | None) -> Matching:
    """Names of a resource as the decorators read them (``Selector``), for the clients."""
    selector = Selector(*names, **keywords)

    def matching(resources: Collection[Resource]) -> Collection[Resource]:
        return selector.select(resources)

    return matching


class OperatorAPIs:
    """The clients of one running operator: made on first use, closed with the operator."""

    def __init__(
        self,
        vault: Vault,
        *,
        token: trio.lowlevel.TrioToken,
        settings: ClientSettings | None = None,
    ) -> None:
        self._vault = vault
        self._token = token
        self._settings = settings
        # Made now (an object without connections: no HTTP library is imported until its
        # first request) and read for every trio handler, so a plain attribute.
        self.trio = AsyncAPI(vault, settings=settings, matcher=match_resources)
        """The async client, for trio code."""
        self._asyncio: AsyncAPI | None = None
        self._sync: SyncAPI | None = None

    @property
    def asyncio(self) -> AsyncAPI:
        """The same client for asyncio code: its calls run in the operator's trio run."""
        if self._asyncio is None:
            self._asyncio = self.trio.with_call_in(run_trio_from_asyncio)
        return self._asyncio

    @property
    def sync(self) -> SyncAPI:
        """The sync client, for sync code in worker threads."""
        if self._sync is None:
            credentials = VaultFromThread(self._vault, self._token)
            self._sync = SyncAPI(credentials, settings=self._settings, matcher=match_resources)
        return self._sync

    def for_flavor(self, flavor: Flavor | None) -> AsyncAPI | SyncAPI:
        """The client for a handler: ``None`` for a sync one, else its async flavor."""
        if flavor is None:
            return self.sync
        return self.asyncio if flavor == "asyncio" else self.trio

    async def aclose(self) -> None:
        """Close what was made (no connections, if no code sent a request)."""
        await self.trio.aclose()
        if self._sync is not None:
            self._sync.close()


_current: contextvars.ContextVar[OperatorAPIs | None] = contextvars.ContextVar(
    "trioperator_api_clients", default=None
)


def current_apis() -> OperatorAPIs | None:
    """The clients of the operator running the calling code, if any."""
    return _current.get()


@contextlib.contextmanager
def serving_apis(apis: OperatorAPIs) -> Iterator[OperatorAPIs]:
    """Make ``apis`` the clients of the code run within (tasks started inside inherit it)."""
    token = _current.set(apis)
    try:
        yield apis
    finally:
        _current.reset(token)


def _running() -> OperatorAPIs:
    apis = _current.get()
    if apis is None:
        raise RuntimeError(
            "No operator is running here: api_client() works in an operator's code (its "
            "handlers, or tasks they start). Scripts use trioperator.connect_api()."
        )
    return apis


def api_client() -> AsyncAPI:
    """The running operator's async API client, logged in as the operator.

    From trio code the client itself; from asyncio code (an asyncio-flavoured handler) a view
    of it usable there. Sync code in threads uses :func:`sync_api_client`.
    """
    apis = _running()
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        raise RuntimeError(
            "api_client() is for async code; sync code (e.g. in a thread) uses "
            "trioperator.sync_api_client()."
        ) from None
    return apis.asyncio if library == "asyncio" else apis.trio


def sync_api_client() -> SyncAPI:
    """The running operator's sync API client (for sync handlers, in worker threads)."""
    return _running().sync


def _credentials(
    kubeconfig: str | None,
    context: str | None,
    credentials: ConnectionInfo | Iterable[ConnectionInfo] | None,
) -> KnownCredentials:
    if credentials is not None:
        if kubeconfig is not None or context is not None:
            raise TypeError("Give credentials= or a kubeconfig (and context=), not both.")
        infos = [credentials] if isinstance(credentials, ConnectionInfo) else list(credentials)
        return KnownCredentials(infos)
    return KnownCredentials([load_kubeconfig(kubeconfig, context=context)])


def connect_api(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    credentials: ConnectionInfo | Iterable[ConnectionInfo] | None = None,
    settings: ClientSettings | None = None,
) -> AsyncAPI:
    """An async API client for scripts and tests (outside an operator), on trio or asyncio.

    Logged in with the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config`` when not given, its
    current context unless ``context``), or with the given ``credentials``. Close it (``async
    with connect_api() as api:``). Within an operator, use the ``api`` kwarg instead.
    """
    return AsyncAPI(
        _credentials(kubeconfig, context, credentials), settings=settings, matcher=match_resources
    )


def connect_sync_api(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    credentials: ConnectionInfo | Iterable[ConnectionInfo] | None = None,
    settings: ClientSettings | None = None,
) -> SyncAPI:
    """A sync API client for scripts and tests: as :func:`connect_api`, without ``await``."""
    return SyncAPI(
        _credentials(kubeconfig, context, credentials), settings=settings, matcher=match_resources
    )


def with_api_kwarg(kwargs: Any, flavor: Flavor | None) -> Any:
    """``kwargs`` with the ``api`` kwarg for a handler of this flavor (``None``: sync), if an
    operator is running and nothing else took the name (an index of that name wins)."""
    apis = _current.get()
    if apis is None or API_KWARG in kwargs:
        return kwargs
    return {**kwargs, API_KWARG: apis.for_flavor(flavor)}
