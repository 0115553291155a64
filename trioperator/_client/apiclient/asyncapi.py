"""The async API client for operator code: :class:`AsyncAPI` and its per-resource views.

It runs on trio natively and on asyncio through anyio (httpx's async client does both). In an
operator, asyncio-flavoured handlers get a view of the operator's one client whose calls run in
the operator's trio run (``call_in``), where its vault lives: one client and one login for all.

Every request picks the vault's best credentials; a 401 invalidates them in that vault (the
operator's login handlers run again, once, for everybody) and the request is sent again with
the next ones, at most ``settings.relogins`` times. 429s, and 5xx and connection failures of
requests that are safe to repeat, are retried ``settings.retries`` times with a growing delay
(or the server's ``Retry-After``, bounded too). Errors come out as the package's typed
``APIError`` classes (Kopf's names), carrying the server's ``Status`` as ``payload``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from trioperator._client.apiclient import calls
from trioperator._client.apiclient.calls import Call, ObjectList, PatchType, Selector
from trioperator._client.apiclient.credentials import AsyncCredentials
from trioperator._client.apiclient.lookup import (
    ResourceMatcher,
    ResourceView,
    choose,
    group_versions,
    resources_of,
    wanted,
)
from trioperator._client.apiclient.settings import ClientSettings
from trioperator._client.apiclient.watching import WatchState
from trioperator._client.credentials import ConnectionInfo
from trioperator._client.errors import (
    APIConnectionError,
    APIError,
    APINotFoundError,
)
from trioperator._client.resources import Resource

if TYPE_CHECKING:
    from trioperator._client.apiclient.transport import AsyncSession, AsyncStream, Received

__all__ = ["AsyncAPI", "AsyncPager", "AsyncResourceAPI", "AsyncWatch"]

T = TypeVar("T")
CallIn = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""Runs an async function elsewhere (e.g. in the operator's trio run) and returns its result."""

PAGE_SIZE = 500


class AsyncAPI:
    """An async Kubernetes API client: ``api.resource(...)`` gives the operations.

    Use it as an async context manager, or call :meth:`aclose` (an operator closes its own).
    """

    def __init__(
        self,
        credentials: AsyncCredentials,
        *,
        settings: ClientSettings | None = None,
        matcher: ResourceMatcher | None = None,
        call_in: CallIn | None = None,
    ) -> None:
        self.settings = settings if settings is not None else ClientSettings()
        self._credentials = credentials
        self._matcher = matcher
        self._call_in = call_in
        self._state = _State()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{' closed' if self._state.closed else ''}>"

    def with_call_in(self, call_in: CallIn) -> AsyncAPI:
        """A view of this client whose calls run through ``call_in`` (e.g. from asyncio code
        into the operator's trio run); it shares the connections, the cache and the closing."""
        view = AsyncAPI(
            self._credentials, settings=self.settings, matcher=self._matcher, call_in=call_in
        )
        view._state = self._state
        return view

    async def __aenter__(self) -> AsyncAPI:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def resource(self, *names: str | Resource, **keywords: str | None) -> AsyncResourceAPI:
        """The operations on one resource, found by discovery on first use.

        ``names`` as in the decorators: ``"deployments"``, ``"deployments.apps"``,
        ``"apps", "v1", "deployments"``, a kind or short name; or keywords ``group=``,
        ``version=``, ``kind=``, ``plural=``, ``singular=``, ``shortcut=``; or a
        :class:`Resource` (e.g. the handler's ``resource`` kwarg), which needs no discovery.
        """
        return AsyncResourceAPI(self, wanted(self._matcher, names, keywords))

    async def resources(self) -> list[Resource]:
        """Every resource the server serves (discovered once, then cached)."""
        return list(await self._run(self._resources))

    async def aclose(self) -> None:
        """Close the connections; the client cannot be used any more."""
        await self._run(self._aclose)

    # ------------------------------------------------------------------ internals

    async def _run(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self._call_in is None:
            return await fn()
        result: T = await self._call_in(fn)
        return result

    async def _aclose(self) -> None:
        import anyio  # see _send

        state = self._state
        state.closed = True
        sessions = list(state.sessions.values())
        state.sessions.clear()
        for session in sessions:
            with anyio.CancelScope(shield=True):
                await session.aclose()

    def _session(self, info: ConnectionInfo) -> AsyncSession:
        state = self._state
        if state.closed:
            raise RuntimeError("The API client is closed.")
        session = state.sessions.get(info)
        if session is None:
            # httpx is imported at the first request only (see transport.py).
            from trioperator._client.apiclient.transport import AsyncSession

            session = state.sessions[info] = AsyncSession(info, self.settings)
        return session

    async def _forget(self, info: ConnectionInfo) -> None:
        import anyio  # see _send

        session = self._state.sessions.pop(info, None)
        if session is not None:
            with anyio.CancelScope(shield=True):
                await session.aclose()

    async def _send(self, call: Call) -> Received:
        """Send with the current credentials; re-login on 401, retry what is retriable."""
        # anyio (sleeping and shielding on trio and asyncio alike) is imported with the first
        # request, as httpx is: an operator whose handlers send none never loads either.
        import anyio

        attempts = calls.Attempts(self.settings)
        while True:
            key, info = await self._credentials.select()
            failure: APIError | APIConnectionError
            try:
                received = await self._session(info).send(call)
            except APIConnectionError as exc:
                failure = exc
            else:
                if received.status < 300:
                    return received
                failure = calls.error_of(received.status, received.body, received.headers)
            if attempts.relogin(failure, call.what):
                await self._credentials.invalidate(key, info, exc=failure)
                await self._forget(info)
                continue
            delay = attempts.retry_delay(failure, call)
            if delay is None:
                raise failure
            await anyio.sleep(delay)

    async def _object(self, call: Call) -> dict[str, Any]:
        received = await self._send(call)
        return calls.decode_object(received.body, call.what)

    @contextlib.asynccontextmanager
    async def _stream(self, call: Call) -> AsyncIterator[AsyncStream]:
        """A watch stream opened with the current credentials (re-login on 401)."""
        attempts = calls.Attempts(self.settings)
        while True:
            key, info = await self._credentials.select()
            async with self._session(info).stream(call) as stream:
                if stream.status >= 300:
                    body = await stream.read(self.settings.max_line_size)
                    failure = calls.error_of(stream.status, body, stream.headers)
                    if attempts.relogin(failure, call.what):
                        await self._credentials.invalidate(key, info, exc=failure)
                        continue
                    raise failure
                yield stream
                return

    async def _resources(self) -> list[Resource]:
        state = self._state
        if state.discovered is None:
            core = await self._send(Call("GET", "/api", idempotent=True))
            groups = await self._send(Call("GET", "/apis", idempotent=True))
            found: list[Resource] = []
            for group_version in group_versions(core.body, groups.body):
                # Not retried on 5xx: an aggregated API whose backend is down answers 503,
                # and is skipped at once.
                try:
                    listing = await self._send(Call("GET", group_version.path))
                except APIError:
                    continue
                found.extend(resources_of(listing.body, group_version))
            state.discovered = found
        return state.discovered

    async def _find(self, matching: Callable[..., Any], described: str) -> Resource:
        found = choose(matching, await self._resources(), described)
        if found is None:
            self._state.discovered = None  # a resource may have been added since: look again
            found = choose(matching, await self._resources(), described)
        if found is None:
            raise LookupError(f"{described}: no such resource is served by the API server.")
        return found


class _State:
    """What a client and its views share."""

    def __init__(self) -> None:
        self.sessions: dict[ConnectionInfo, AsyncSession] = {}
        self.discovered: list[Resource] | None = None
        self.closed = False


class AsyncResourceAPI(ResourceView):
    """The operations on one resource. Bodies are dicts; every call returns the server's."""

    def __init__(self, api: AsyncAPI, resource: Resource | tuple[Callable[..., Any], str]) -> None:
        super().__init__(resource)
        self._api = api

    async def resolve(self) -> Resource:
        """The resource, found by discovery on the first call (``LookupError`` if none)."""
        return await self._api._run(self._resolve)

    async def _resolve(self) -> Resource:
        if self._resource is None:
            assert self._wanted is not None
            self._resource = await self._api._find(*self._wanted)
        return self._resource

    async def _do(self, make: Callable[[Resource], Call]) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            return await self._api._object(make(await self._resolve()))

        return await self._api._run(call)

    async def get(
        self, name: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        """One object (or its subresource, e.g. ``"status"``, ``"scale"``); 404: NotFound."""
        return await self._do(
            lambda r: calls.get_call(r, name, namespace=namespace, subresource=subresource)
        )

    async def list(
        self,
        *,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        limit: int = PAGE_SIZE,
    ) -> ObjectList:
        """All the objects, read in pages of ``limit``; with the ``resource_version`` of the
        listing (to watch from). ``namespace=None``: in all namespaces."""
        pager = self.iterate(
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
        )
        items = ObjectList()
        async for item in pager:
            items.append(item)
        items.resource_version = pager.resource_version
        return items

    def iterate(
        self,
        *,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        limit: int = PAGE_SIZE,
    ) -> AsyncPager:
        """The objects one by one, as an async iterator, fetching a page of ``limit`` at a time."""
        return AsyncPager(
            self,
            lambda r, token: calls.list_call(
                r,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_=token,
            ),
        )

    def watch(
        self,
        *,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        resource_version: str | None = None,
        timeout_seconds: float | None = None,
        bookmarks: bool = False,
    ) -> AsyncWatch:
        """A watch stream: ``async with res.watch(...) as events: async for type, obj in events``.

        It starts at ``resource_version`` (e.g. a listing's; ``None``: the current state, as
        ADDED events) and ends when the server ends it (``timeout_seconds``); resume from
        ``events.resource_version``, which follows the events and bookmarks. ``bookmarks``:
        also yield the ``BOOKMARK`` events. An expired version raises ``APIGoneError`` (410):
        list again. Events are bounded in size (``ClientSettings.max_line_size``).
        """
        timeout = self._api.settings.watch_timeout if timeout_seconds is None else timeout_seconds
        return AsyncWatch(
            self,
            lambda r, version: calls.watch_call(
                r,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                resource_version=version,
                timeout_seconds=timeout,
            ),
            resource_version=resource_version,
            bookmarks=bookmarks,
        )

    async def create(
        self,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create the object (409 ``APIConflictError`` if it exists)."""
        return await self._do(
            lambda r: calls.create_call(
                r,
                body,
                namespace=namespace,
                subresource=subresource,
                field_manager=field_manager,
                dry_run=dry_run,
            )
        )

    async def replace(
        self,
        body: Mapping[str, Any],
        *,
        name: str | None = None,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace the object (PUT); with ``metadata.resourceVersion``: 409 if it changed."""
        return await self._do(
            lambda r: calls.replace_call(
                r,
                body,
                name=name,
                namespace=namespace,
                subresource=subresource,
                field_manager=field_manager,
                dry_run=dry_run,
            )
        )

    async def patch(
        self,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        type: PatchType = "merge",
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch the object: ``type`` ``"merge"`` (a dict), ``"json"`` (a list of operations)
        or ``"strategic"`` (a dict; built-in resources only)."""
        return await self._do(
            lambda r: calls.patch_call(
                r,
                name,
                patch,
                type=type,
                namespace=namespace,
                subresource=subresource,
                field_manager=field_manager,
                dry_run=dry_run,
            )
        )

    async def apply(
        self,
        body: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = False,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply: make the fields in ``body`` (with apiVersion, kind, name) the
        ones ``field_manager`` owns, creating the object if needed.

        Fields owned by another manager raise :class:`APIFieldConflictError` (409) with the
        ``conflicts``; ``force=True`` takes them over.
        """
        return await self._do(
            lambda r: calls.apply_call(
                r,
                body,
                field_manager=field_manager,
                force=force,
                namespace=namespace,
                subresource=subresource,
                dry_run=dry_run,
            )
        )

    async def delete(
        self,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
        missing_ok: bool = False,
    ) -> dict[str, Any] | None:
        """Delete the object; returns what the server returns (the object, still there while
        finalizers hold it, or a Status). ``uid``/``resource_version``: preconditions (409 if
        the object is another one). ``missing_ok``: ``None`` instead of ``APINotFoundError``."""
        try:
            return await self._do(
                lambda r: calls.delete_call(
                    r,
                    name,
                    namespace=namespace,
                    propagation_policy=propagation_policy,
                    grace_period_seconds=grace_period_seconds,
                    uid=uid,
                    resource_version=resource_version,
                    dry_run=dry_run,
                )
            )
        except APINotFoundError:
            if missing_ok:
                return None
            raise

    async def scale(
        self,
        name: str,
        replicas: int,
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """Set ``spec.replicas`` through the ``scale`` subresource; returns the Scale."""
        return await self.patch(
            name,
            {"spec": {"replicas": replicas}},
            namespace=namespace,
            subresource="scale",
            field_manager=field_manager,
        )


class AsyncPager:
    """The objects of a listing as an async iterator, a page at a time.

    A plain class (no async generator): abandoning it midway leaves nothing to finalize.
    ``resource_version`` is the listing's once the last page is read.
    """

    def __init__(
        self, owner: AsyncResourceAPI, make: Callable[[Resource, str | None], Call]
    ) -> None:
        self._owner = owner
        self._make = make
        self._page: list[dict[str, Any]] = []
        self._token: str | None = None
        self._started = False
        self.resource_version: str | None = None

    def __aiter__(self) -> AsyncPager:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._page:
            if self._started and not self._token:
                raise StopAsyncIteration
            await self._owner._api._run(self._fetch)
        return self._page.pop(0)

    async def _fetch(self) -> None:
        resource = await self._owner._resolve()
        call = self._make(resource, self._token)
        listing = await self._owner._api._object(call)
        self._started = True
        page = calls.read_page(listing, resource)
        self._page, self._token = page.items, page.token
        self.resource_version = page.resource_version


class AsyncWatch:
    """A watch stream: an async context manager, then an async iterator of (type, object)."""

    def __init__(
        self,
        owner: AsyncResourceAPI,
        make: Callable[[Resource, str | None], Call],
        *,
        resource_version: str | None,
        bookmarks: bool,
    ) -> None:
        self._owner = owner
        self._make = make
        self._state = WatchState(resource_version, bookmarks=bookmarks)
        self._exits = contextlib.AsyncExitStack()
        self._stream: AsyncStream | None = None

    @property
    def resource_version(self) -> str | None:
        """The newest version seen (events and bookmarks): where to resume watching from."""
        return self._state.resource_version

    async def __aenter__(self) -> AsyncWatch:
        await self._owner._api._run(self._open)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._owner._api._run(self._exits.aclose)

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> tuple[str, dict[str, Any]]:
        event: tuple[str, dict[str, Any]] | None = await self._owner._api._run(self._next)
        if event is None:
            raise StopAsyncIteration
        return event

    async def _open(self) -> None:
        resource = await self._owner._resolve()
        call = self._make(resource, self._state.resource_version)
        self._stream = await self._exits.enter_async_context(self._owner._api._stream(call))

    async def _next(self) -> tuple[str, dict[str, Any]] | None:
        if self._stream is None:
            raise RuntimeError("Use the watch as `async with resource.watch(...) as events:`.")
        while True:
            line = await self._stream.next_line()
            if line is None:
                return None
            event = self._state.interpret(line)
            if event is not None:
                return event
