"""The sync API client for operator code: :class:`SyncAPI`, for sync handlers (run in worker
threads) and scripts. The same operations and errors as the async one (``asyncapi.py``), on
``httpx.Client``; inside an operator it logs in through the operator's vault as well.
"""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from trioperator._client.apiclient import calls
from trioperator._client.apiclient.calls import Call, ObjectList, PatchType, Selector
from trioperator._client.apiclient.credentials import SyncCredentials
from trioperator._client.apiclient.lookup import (
    Matching,
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
    from trioperator._client.apiclient.transport import Received, SyncSession, SyncStream

__all__ = ["SyncAPI", "SyncResourceAPI", "SyncWatch"]

PAGE_SIZE = 500


class SyncAPI:
    """A sync Kubernetes API client: ``api.resource(...)`` gives the operations.

    Safe to share between threads. Use it as a context manager, or call :meth:`close` (an
    operator closes its own).
    """

    def __init__(
        self,
        credentials: SyncCredentials,
        *,
        settings: ClientSettings | None = None,
        matcher: ResourceMatcher | None = None,
    ) -> None:
        self.settings = settings if settings is not None else ClientSettings()
        self._credentials = credentials
        self._matcher = matcher
        self._sessions: dict[ConnectionInfo, SyncSession] = {}
        self._discovered: list[Resource] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{' closed' if self._closed else ''}>"

    def __enter__(self) -> SyncAPI:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def resource(self, *names: str | Resource, **keywords: str | None) -> SyncResourceAPI:
        """The operations on one resource: see :meth:`AsyncAPI.resource`."""
        return SyncResourceAPI(self, wanted(self._matcher, names, keywords))

    def resources(self) -> list[Resource]:
        """Every resource the server serves (discovered once, then cached)."""
        if self._discovered is None:
            core = self._send(Call("GET", "/api", idempotent=True))
            groups = self._send(Call("GET", "/apis", idempotent=True))
            found: list[Resource] = []
            for group_version in group_versions(core.body, groups.body):
                # Not retried on 5xx: an aggregated API whose backend is down answers 503,
                # and is skipped at once.
                try:
                    listing = self._send(Call("GET", group_version.path))
                except APIError:
                    continue
                found.extend(resources_of(listing.body, group_version))
            self._discovered = found
        return list(self._discovered)

    def close(self) -> None:
        """Close the connections; the client cannot be used any more."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()

    # ------------------------------------------------------------------ internals

    def _session(self, info: ConnectionInfo) -> SyncSession:
        if self._closed:
            raise RuntimeError("The API client is closed.")
        session = self._sessions.get(info)
        if session is None:
            from trioperator._client.apiclient.transport import SyncSession

            session = self._sessions.setdefault(info, SyncSession(info, self.settings))
        return session

    def _send(self, call: Call) -> Received:
        attempts = calls.Attempts(self.settings)
        while True:
            key, info = self._credentials.select_sync()
            failure: APIError | APIConnectionError
            try:
                received = self._session(info).send(call)
            except APIConnectionError as exc:
                failure = exc
            else:
                if received.status < 300:
                    return received
                failure = calls.error_of(received.status, received.body, received.headers)
            if attempts.relogin(failure, call.what):
                self._credentials.invalidate_sync(key, info, exc=failure)
                session = self._sessions.pop(info, None)
                if session is not None:
                    session.close()
                continue
            delay = attempts.retry_delay(failure, call)
            if delay is None:
                raise failure
            time.sleep(delay)

    def _object(self, call: Call) -> dict[str, Any]:
        received = self._send(call)
        return calls.decode_object(received.body, call.what)

    @contextlib.contextmanager
    def _stream(self, call: Call) -> Iterator[SyncStream]:
        attempts = calls.Attempts(self.settings)
        while True:
            key, info = self._credentials.select_sync()
            with self._session(info).stream(call) as stream:
                if stream.status >= 300:
                    body = stream.read(self.settings.max_line_size)
                    failure = calls.error_of(stream.status, body, stream.headers)
                    if attempts.relogin(failure, call.what):
                        self._credentials.invalidate_sync(key, info, exc=failure)
                        continue
                    raise failure
                yield stream
                return

    def _find(self, matching: Matching, described: str) -> Resource:
        found = choose(matching, self.resources(), described)
        if found is None:
            self._discovered = None
            found = choose(matching, self.resources(), described)
        if found is None:
            raise LookupError(f"{described}: no such resource is served by the API server.")
        return found


class SyncResourceAPI(ResourceView):
    """The operations on one resource, as in :class:`AsyncResourceAPI`, without ``await``."""

    def __init__(self, api: SyncAPI, resource: Resource | tuple[Matching, str]) -> None:
        super().__init__(resource)
        self._api = api

    def resolve(self) -> Resource:
        """The resource, found by discovery on the first call (``LookupError`` if none)."""
        if self._resource is None:
            assert self._wanted is not None
            self._resource = self._api._find(*self._wanted)
        return self._resource

    def _do(self, make: Callable[[Resource], Call]) -> dict[str, Any]:
        return self._api._object(make(self.resolve()))

    def get(
        self, name: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        """One object (or its subresource); 404: ``APINotFoundError``."""
        return self._do(
            lambda r: calls.get_call(r, name, namespace=namespace, subresource=subresource)
        )

    def list(
        self,
        *,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        limit: int = PAGE_SIZE,
    ) -> ObjectList:
        """All the objects, read in pages of ``limit``, with the listing's ``resource_version``."""
        items = ObjectList()
        pages = self._pages(namespace, label_selector, field_selector, limit, items)
        for page in pages:
            items.extend(page)
        return items

    def iterate(
        self,
        *,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        limit: int = PAGE_SIZE,
    ) -> Iterator[dict[str, Any]]:
        """The objects one by one, fetching a page of ``limit`` at a time."""
        for page in self._pages(namespace, label_selector, field_selector, limit, ObjectList()):
            yield from page

    def _pages(
        self,
        namespace: str | None,
        label_selector: Selector,
        field_selector: Selector,
        limit: int,
        into: ObjectList,
    ) -> Iterator[builtins.list[dict[str, Any]]]:
        resource = self.resolve()
        token: str | None = None
        while True:
            call = calls.list_call(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_=token,
            )
            page = calls.read_page(self._api._object(call), resource)
            into.resource_version = page.resource_version
            yield page.items
            token = page.token
            if token is None:
                return

    def watch(
        self,
        *,
        namespace: str | None = None,
        label_selector: Selector = None,
        field_selector: Selector = None,
        resource_version: str | None = None,
        timeout_seconds: float | None = None,
        bookmarks: bool = False,
    ) -> SyncWatch:
        """A watch stream: ``with res.watch(...) as events: for type, obj in events``.

        As :meth:`AsyncResourceAPI.watch`.
        """
        settings = self._api.settings
        timeout = settings.watch_timeout if timeout_seconds is None else timeout_seconds
        resource = self.resolve()
        call = calls.watch_call(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            timeout_seconds=timeout,
        )
        return SyncWatch(self._api, call, WatchState(resource_version, bookmarks=bookmarks))

    def create(
        self,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create the object (409 ``APIConflictError`` if it exists)."""
        return self._do(
            lambda r: calls.create_call(
                r,
                body,
                namespace=namespace,
                subresource=subresource,
                field_manager=field_manager,
                dry_run=dry_run,
            )
        )

    def replace(
        self,
        body: Mapping[str, Any],
        *,
        name: str | None = None,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace the object (PUT)."""
        return self._do(
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

    def patch(
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
        """Patch the object: ``type`` ``"merge"``, ``"json"`` or ``"strategic"``."""
        return self._do(
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

    def apply(
        self,
        body: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = False,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply (see :meth:`AsyncResourceAPI.apply`)."""
        return self._do(
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

    def delete(
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
        """Delete the object (see :meth:`AsyncResourceAPI.delete`)."""
        try:
            return self._do(
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

    def scale(
        self,
        name: str,
        replicas: int,
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """Set ``spec.replicas`` through the ``scale`` subresource; returns the Scale."""
        return self.patch(
            name,
            {"spec": {"replicas": replicas}},
            namespace=namespace,
            subresource="scale",
            field_manager=field_manager,
        )


class SyncWatch:
    """A watch stream: a context manager, then an iterator of (type, object)."""

    def __init__(self, api: SyncAPI, call: Call, state: WatchState) -> None:
        self._api = api
        self._call = call
        self._state = state
        self._exits = contextlib.ExitStack()
        self._stream: SyncStream | None = None

    @property
    def resource_version(self) -> str | None:
        """The newest version seen (events and bookmarks): where to resume watching from."""
        return self._state.resource_version

    def __enter__(self) -> SyncWatch:
        self._stream = self._exits.enter_context(self._api._stream(self._call))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exits.close()

    def __iter__(self) -> SyncWatch:
        return self

    def __next__(self) -> tuple[str, dict[str, Any]]:
        if self._stream is None:
            raise RuntimeError("Use the watch as `with resource.watch(...) as events:`.")
        while True:
            line = self._stream.next_line()
            if line is None:
                raise StopIteration
            event = self._state.interpret(line)
            if event is not None:
                return event
