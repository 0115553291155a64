"""An in-process fake Kubernetes API server for tests, served over plain HTTP on loopback.

Operators talk to it exactly as to a real cluster (any HTTP client, a kubeconfig file), while
tests see and change its state directly and inject faults: failed, dropped or stalled requests,
errors in watch streams, cut connections. All timing (watch timeouts, bookmarks, injected
delays) uses trio's clock, so a ``MockClock`` makes it instant and exact.

Usage::

    async with FakeAPI.serve() as api:
        kubeconfig = api.kubeconfig(tmp_path)
        api.create_object("configmaps", {"metadata": {"name": "x", "namespace": "default"}})
        api.inject("PATCH", "/api/v1/namespaces/*/configmaps/*", status=429,
                   headers={"Retry-After": "3"})
        ...  # run the operator against it
        assert [r.method for r in api.requests if r.path.endswith("/x")] == [...]

The object semantics are in :mod:`trioperator.testing._fakestore`; ``tests/contract`` runs the
same scenarios against this fake and a real kube-apiserver. Known differences are listed in
``FakeAPI``'s docstring.
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import math
import os
import pathlib
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from functools import partial
from typing import Any, NamedTuple
from urllib.parse import unquote

import msgspec
import trio
import yaml

from trioperator._engine.patches import apply_merge_patch
from trioperator._runtime.support.httpserver import (
    UNBOUNDED,
    DropConnection,
    Request,
    Response,
    serve_http,
)
from trioperator._util.clock import now as operator_now
from trioperator.testing._fakestore import (
    APPLY_PATCH,
    DEFAULT_MANAGER,
    Change,
    FieldSelector,
    LabelSelector,
    Obj,
    ResourceDef,
    StatusError,
    Store,
    clone,
    resource_not_found,
    watch_event,
)

__all__ = ["FakeAPI", "Injection", "RecordedRequest", "StatusError"]

_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder()

PathPattern = str | re.Pattern[str]

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})

_REASONS = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "the server reported a conflict"),
    410: ("Expired", "The resourceVersion for the provided watch is too old."),
    415: ("UnsupportedMediaType", "415: Unsupported Media Type"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "an error on the server has prevented the request from succeeding"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted"),
}


def _status_body(code: int, reason: str | None = None, message: str | None = None) -> Obj:
    default_reason, default_message = _REASONS.get(code, ("", f"HTTP {code}"))
    return StatusError(code, reason or default_reason, message or default_message).status


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, _ENCODE.encode(body) + b"\n", dict(headers or {}))


def _page_not_found() -> Response:
    return Response(404, b"404 page not found\n", content_type="text/plain; charset=utf-8")


def _matches(pattern: PathPattern, path: str) -> bool:
    """A compiled regex or a string starting with ``^`` searches; other strings are globs."""
    if isinstance(pattern, re.Pattern):
        return pattern.search(path) is not None
    if pattern.startswith("^"):
        return re.search(pattern, path) is not None
    return fnmatch.fnmatchcase(path, pattern)


def _copy(obj: Obj) -> Obj:
    copied: Obj = clone(obj)
    return copied


def _decode_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return _DECODE.decode(raw)
    except msgspec.DecodeError:
        return raw


def _is_watch(request: Request) -> bool:
    return request.param("watch") in _TRUE or "/watch/" in request.path


# ----------------------------------------------------------------------------- public records


class RecordedRequest(NamedTuple):
    """One request as the fake received it (injected failures included)."""

    method: str
    path: str
    query: dict[str, str]
    """The first value of each query parameter."""
    body: Any
    """The decoded JSON body, ``None`` when empty, raw bytes when not JSON."""


class Injection:
    """A fault waiting for matching requests; see :meth:`FakeAPI.inject`."""

    def __init__(
        self,
        method: str | None,
        path_pattern: PathPattern,
        *,
        status: int | None,
        body: Any,
        headers: Mapping[str, str],
        times: int | None,
        drop: bool,
        delay: float | None,
        watch: bool | None,
    ) -> None:
        self.method = method.upper() if method else None
        self.path_pattern = path_pattern
        self.status = status
        self.body = body
        self.headers = dict(headers)
        self.times = times
        self.drop = drop
        self.delay = delay
        self.watch = watch
        self.hits = 0
        """How many requests this injection has affected so far."""

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def matches(self, request: Request) -> bool:
        if self.exhausted:
            return False
        if self.method is not None and request.method != self.method:
            return False
        if self.watch is not None and _is_watch(request) != self.watch:
            return False
        return _matches(self.path_pattern, request.path)

    def response(self) -> Response:
        assert self.status is not None
        if self.body is None:
            body: Any = _status_body(self.status)
            retry_after = next(
                (v for k, v in self.headers.items() if k.lower() == "retry-after"), None
            )
            if retry_after is not None and retry_after.strip().isdigit():
                body["details"] = {"retryAfterSeconds": int(retry_after)}
            return _json(self.status, body, self.headers)
        if isinstance(self.body, bytes):
            return Response(self.status, self.body, self.headers)
        return _json(self.status, self.body, self.headers)

    def __repr__(self) -> str:
        return (
            f"<Injection {self.method or '*'} {self.path_pattern!r} status={self.status}"
            f" drop={self.drop} delay={self.delay} hits={self.hits}/{self.times}>"
        )


# ------------------------------------------------------------------------------- watch streams


class _Control:
    def __init__(self, name: str) -> None:
        self.name = name


_END = _Control("end")
_DROP = _Control("drop")


class _WatchStream:
    """The body of one watch response: queued event lines, bookmarks and the timeout.

    A plain async iterator rather than an async generator: the HTTP server may abandon it
    mid-way (the client went away), and a class needs no finalization for that. The fake keeps
    only weak references to streams, so an abandoned one simply disappears.
    """

    def __init__(
        self,
        *,
        path: str,
        res: ResourceDef,
        version: str,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        deadline: float,
        bookmarks: bool,
        bookmark_interval: float,
        current_rv: Callable[[], int],
        start_rv: int,
    ) -> None:
        self.path = path
        self.res = res
        self.version = version
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self._deadline = deadline
        self._bookmarks = bookmarks
        self._interval = bookmark_interval
        self._current_rv = current_rv
        self._start_rv = start_rv
        self._send, self._receive = trio.open_memory_channel[bytes | _Control](math.inf)
        self._next_bookmark = self._schedule(trio.current_time())
        self.closed = False

    def _schedule(self, now: float) -> float:
        """When the next bookmark is due: periodically, and 2 s before the timeout (as 1.20)."""
        if not self._bookmarks:
            return math.inf
        due = now + self._interval
        pre_timeout = self._deadline - 2
        if now < pre_timeout < due:
            due = pre_timeout
        return due if due < self._deadline else math.inf

    # Feeding (synchronous, from the fake's handlers and store listeners).

    def _put(self, item: bytes | _Control) -> None:
        if not self.closed:
            self._send.send_nowait(item)

    def push(self, event_type: str, obj: Obj) -> None:
        obj = _present(obj, self.res, self.version)
        self._put(_ENCODE.encode({"type": event_type, "object": obj}) + b"\n")

    def push_change(self, change: Change) -> None:
        event = watch_event(
            change, namespace=self.namespace, labels=self.labels, fields=self.fields
        )
        if event is not None:
            self.push(*event)

    def push_error(self, status: Obj) -> None:
        """An ERROR event, after which the stream ends (as the real server's do)."""
        self._put(_ENCODE.encode({"type": "ERROR", "object": status}) + b"\n")
        self._put(_END)

    def end(self) -> None:
        self._put(_END)

    def drop(self) -> None:
        self._put(_DROP)

    # Consuming (by the HTTP server).

    def __aiter__(self) -> _WatchStream:
        return self

    async def __anext__(self) -> bytes:
        while not self.closed:
            item: bytes | _Control | None = None
            with trio.move_on_at(min(self._deadline, self._next_bookmark)):
                item = await self._receive.receive()
            if item is None:
                now = trio.current_time()
                if now >= self._deadline:
                    break
                if now >= self._next_bookmark:
                    self._next_bookmark = self._schedule(now)
                    # Like 1.20's watch cache: a bookmark only when there is news for the
                    # watcher, i.e. the resourceVersion moved past where the watch started.
                    if self._current_rv() > self._start_rv:
                        return self._bookmark()
                continue
            if item is _DROP:
                self.closed = True
                raise DropConnection
            if item is _END:
                break
            assert isinstance(item, bytes)
            return item
        self.closed = True
        raise StopAsyncIteration

    def _bookmark(self) -> bytes:
        meta: Obj = {"resourceVersion": str(self._current_rv())}
        if not self.res.custom:
            meta["creationTimestamp"] = None  # what a typed empty object serializes to
        obj = {
            "kind": self.res.kind,
            "apiVersion": self.res.api_version(self.version),
            "metadata": meta,
        }
        return _ENCODE.encode({"type": "BOOKMARK", "object": obj}) + b"\n"


def _present(obj: Obj, res: ResourceDef, version: str) -> Obj:
    """The object as served at ``version`` (only apiVersion differs: no conversion webhooks)."""
    api_version = res.api_version(version)
    if obj.get("apiVersion") == api_version:
        return obj
    return {"apiVersion": api_version, **{k: v for k, v in obj.items() if k != "apiVersion"}}


# ------------------------------------------------------------------------------------ the fake


class FakeAPI:
    """A compact but faithful emulation of the kube-apiserver behaviours operators rely on.

    Serves discovery, namespaces, configmaps, secrets, pods (no kubelet: they stay Pending),
    deployments (no controller: no ReplicaSets), core and ``events.k8s.io`` events, leases,
    webhook configurations and CRDs (a created CRD is established at once and its custom
    resource becomes servable; deleting it removes them). Objects get resourceVersions from
    one global counter, uids, creation timestamps and generations; lists support label/field
    selectors and limit/continue paging; watches support resourceVersion resumption from a
    bounded history (410 ERROR event when too old), bookmarks and timeouts; writes support
    PUT, merge, strategic-merge and JSON patches, server-side apply with field managers and
    ``managedFields``, status and scale subresources, finalizers and deletion timestamps.

    Known differences from kube-apiserver 1.20 (the contract tests pin the rest):

    - No admission webhooks, RBAC, schema validation/pruning of custom resources,
      conversion between versions (only ``apiVersion`` changes), or defaulting beyond a few
      fields (e.g. a Deployment's containers get no ``imagePullPolicy``, so no manager owns
      one). ``dryRun`` is ignored (the write happens).
    - ``managedFields`` are recorded only once an object is applied to or written with a
      ``fieldManager`` (always with ``track_managed_fields=True``); Update managers are not
      capped at 10 (no ``ancient-changes``). Custom resources are treated as schemaless
      (``x-kubernetes-preserve-unknown-fields``): their lists are atomic for apply. Only the
      merge keys of the built-in kinds' common lists are known (containers, env, volumes,
      ports, ownerReferences, conditions, ...); other lists of built-in kinds are atomic.
    - Namespace deletion behaves as with kube-controller-manager running: contents are deleted
      at once (their finalizers honoured) and the namespace vanishes when empty; a bare 1.20
      API server leaves it Terminating forever. Deleting a CRD removes its objects at once,
      ignoring their finalizers. ``propagationPolicy`` is ignored: there is no garbage
      collector.
    - Pods are deleted at once (no graceful termination) and need no service account.
    - Continue tokens page over the current state, not over a snapshot.
    - Watch history is per resource and bounded by ``history_limit`` changes (the real watch
      cache is sized by time and count); a watch from a future resourceVersion streams
      instead of failing after 3 s.
    - Bookmarks carry the global resourceVersion; the real one lags by up to etcd's progress
      interval. As in 1.20, a bookmark is sent only once something changed after the watch's
      starting resourceVersion, and never on watches without a resourceVersion.
    - Bearer tokens are the only authentication; without ``tokens`` everything is allowed.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 60.0,
        history_limit: int = 1000,
        tokens: Iterable[str] | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
        track_managed_fields: bool = False,
    ) -> None:
        """
        :param bookmark_interval: seconds (trio time) between periodic watch bookmarks.
        :param history_limit: changes kept per resource for resuming watches (the real
            server's watch cache holds at least 100).
        :param tokens: accepted bearer tokens; ``None`` accepts any request.
        :param clock: wall-clock time for timestamps; by default it advances with trio's clock
            from the real time of the first use, so a ``MockClock`` governs it too.
        :param track_managed_fields: record ``metadata.managedFields`` on every write, as the
            real server does. By default only writes that name a ``fieldManager``, applies,
            and later writes to objects that have managed fields record them, so that tests
            comparing whole objects are not concerned with them.
        """
        self.host = host
        self._bind_port = port
        self._port: int | None = None
        self.bookmark_interval = bookmark_interval
        self.tokens: set[str] | None = set(tokens) if tokens is not None else None
        self.requests: list[RecordedRequest] = []
        """Every request received, in order (a plain list: ``clear()`` it at will)."""
        self.raw_requests: list[Request] = []
        """The same requests with headers and raw bodies."""
        self._clock = clock
        self._injections: list[Injection] = []
        self._pending_watch_errors: list[tuple[PathPattern, Obj]] = []
        self._watches: weakref.WeakSet[_WatchStream] = weakref.WeakSet()
        self.store = Store(
            now=self._timestamp,
            history_limit=history_limit,
            track_managed_fields=track_managed_fields,
        )
        """The object store itself, for what the convenience methods do not cover."""
        self.store.listeners.append(self._on_change)
        self.store.removal_listeners.append(self._on_resource_removed)

    # ------------------------------------------------------------------ serving

    @classmethod
    @contextlib.asynccontextmanager
    async def serve(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 60.0,
        history_limit: int = 1000,
        tokens: Iterable[str] | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
        track_managed_fields: bool = False,
    ) -> AsyncIterator[FakeAPI]:
        """Serve a new fake for the duration of the ``async with`` block."""
        api = cls(
            host=host,
            port=port,
            bookmark_interval=bookmark_interval,
            history_limit=history_limit,
            tokens=tokens,
            clock=clock,
            track_managed_fields=track_managed_fields,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(api.run)
            try:
                yield api
            finally:
                nursery.cancel_scope.cancel()

    async def run(
        self, *, task_status: trio.TaskStatus[FakeAPI] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; ``nursery.start(api.run)`` returns once it accepts requests."""
        async with trio.open_nursery() as nursery:
            listeners: list[trio.SocketListener] = await nursery.start(
                partial(
                    serve_http,
                    self._handle,
                    host=self.host,
                    port=self._bind_port,
                    limits=UNBOUNDED,
                )
            )
            self._port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the fake API is not serving yet: start FakeAPI.run first")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, once serving."""
        return f"http://{self.host}:{self.port}"

    def kubeconfig(
        self,
        path: str | os.PathLike[str],
        *,
        token: str | None = None,
        namespace: str = "default",
    ) -> pathlib.Path:
        """Write a kubeconfig for this fake (bearer-token auth); a directory gets ``kubeconfig``.

        Returns the file's path.
        """
        target = pathlib.Path(path)
        if target.is_dir():
            target = target / "kubeconfig"
        if token is None:
            token = min(self.tokens) if self.tokens else "fake-token"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    # ------------------------------------------------------------------ time

    def now(self) -> datetime.datetime:
        """The fake's wall-clock time (see ``clock`` in the constructor)."""
        if self._clock is not None:
            return self._clock()
        return operator_now()  # the operator's wall clock: both agree on the time

    def _timestamp(self) -> str:
        return self.now().astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    # ------------------------------------------------------------------ fault injection

    def inject(
        self,
        method: str | None,
        path_pattern: PathPattern,
        *,
        status: int | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        times: int | None = 1,
        drop: bool = False,
        delay: float | None = None,
        watch: bool | None = None,
    ) -> Injection:
        """Make the next ``times`` matching requests fail, vanish, or stall.

        :param method: HTTP method to match, or ``None`` for any.
        :param path_pattern: a glob on the URL path (``*`` also crosses ``/``), or a regex
            (compiled, or a string starting with ``^``) searched in it.
        :param status: answer with this HTTP status; the body is ``body`` (JSON-encoded unless
            bytes) or a ``Status`` like the real server's, with ``details.retryAfterSeconds``
            when ``headers`` has a numeric ``Retry-After``.
        :param drop: close the connection without any response.
        :param delay: wait this long (trio time) first; alone, the request is then served.
        :param times: how many requests to affect; ``None`` for all of them until removed.
        :param watch: match only watch requests (``True``) or only others (``False``).
        """
        if status is None and not drop and delay is None:
            raise ValueError("an injection needs a status, drop=True or a delay")
        injection = Injection(
            method,
            path_pattern,
            status=status,
            body=body,
            headers=headers or {},
            times=times,
            drop=drop,
            delay=delay,
            watch=watch,
        )
        self._injections.append(injection)
        return injection

    def remove_injection(self, injection: Injection) -> None:
        with contextlib.suppress(ValueError):
            self._injections.remove(injection)

    def clear_injections(self) -> None:
        """Forget all pending request injections and watch errors."""
        self._injections.clear()
        self._pending_watch_errors.clear()

    def inject_watch_error(
        self,
        path_pattern: PathPattern,
        code: int = 410,
        *,
        reason: str | None = None,
        message: str | None = None,
    ) -> int:
        """Send an ERROR event (a ``Status`` with ``code``) into the open matching watch streams.

        Each such stream ends after the error, as real ones do. If none is open, the error
        waits for the next matching watch request instead. Returns the number of open streams
        that got it.
        """
        status = _status_body(code, reason, message)
        streams = [
            s for s in list(self._watches) if not s.closed and _matches(path_pattern, s.path)
        ]
        for stream in streams:
            stream.push_error(status)
        if not streams:
            self._pending_watch_errors.append((path_pattern, status))
        return len(streams)

    def drop_watches(self, path_pattern: PathPattern | None = None) -> int:
        """Cut the connections of all open (or all matching) watch streams mid-stream.

        Returns how many were cut.
        """
        streams = [
            s
            for s in list(self._watches)
            if not s.closed and (path_pattern is None or _matches(path_pattern, s.path))
        ]
        for stream in streams:
            stream.drop()
        return len(streams)

    @property
    def open_watches(self) -> int:
        """How many watch streams are being served right now."""
        return sum(1 for s in list(self._watches) if not s.closed)

    # ------------------------------------------------------------------ direct state access

    def resource(self, resource: str) -> ResourceDef:
        """A served resource by ``plural`` (the core group first) or ``plural.group``."""
        return self.store.resolve(resource)

    @property
    def resource_version(self) -> str:
        """The latest resourceVersion handed out."""
        return str(self.store.rv)

    def objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of a resource (of one namespace, or all)."""
        return [_copy(obj) for obj in self.store.iter_objects(self.resource(resource), namespace)]

    def get_object(self, resource: str, name: str, namespace: str | None = None) -> Obj:
        """A copy of one stored object; ``KeyError`` if absent."""
        obj = self.store.peek(self.resource(resource), namespace, name)
        if obj is None:
            raise KeyError(
                f"{resource} {namespace + '/' if namespace else ''}{name} does not exist"
            )
        return _copy(obj)

    def has_object(self, resource: str, name: str, namespace: str | None = None) -> bool:
        return self.store.peek(self.resource(resource), namespace, name) is not None

    def create_object(self, resource: str, body: Obj, namespace: str | None = None) -> Obj:
        """Create as a POST would (events, validation); the namespace defaults to the body's."""
        res = self.resource(resource)
        if namespace is None and res.namespaced:
            namespace = (body.get("metadata") or {}).get("namespace")
        return _copy(self.store.create(res, namespace, body))

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
        metadata: Obj = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        return self.create_object("namespaces", {"metadata": metadata})

    def put_object(self, resource: str, body: Obj) -> Obj:
        """Create the object, or replace it whole: status included, no resourceVersion check.

        One write, one watch event, as if a controller had full control over the object.
        """
        res = self.resource(resource)
        meta = body.get("metadata") or {}
        namespace = meta.get("namespace") if res.namespaced else None
        old = self.store.peek(res, namespace, meta.get("name", ""))
        if old is None:
            return _copy(self.store.create(res, namespace, body, keep_status=True))
        body = _copy(body)
        body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return _copy(
            self.store.replace(res, namespace, old["metadata"]["name"], body, subresource="*")
        )

    def patch_object(
        self,
        resource: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
    ) -> Obj:
        """Merge-patch an object, its status included, in one write (see ``put_object``)."""
        return self.put_object(
            resource, apply_merge_patch(self.get_object(resource, name, namespace), patch)
        )

    def apply_object(
        self,
        resource: str,
        body: Obj,
        *,
        manager: str,
        force: bool = False,
        namespace: str | None = None,
    ) -> Obj:
        """Server-side apply ``body`` as field manager ``manager``, as a PATCH would.

        Creates the object if absent. Raises :class:`StatusError` (409) when it would change
        fields that other managers own, unless ``force``: e.g. to play a user's ``kubectl
        apply --server-side`` against an operator's children.
        """
        res = self.resource(resource)
        meta = body.get("metadata") or {}
        if namespace is None and res.namespaced:
            namespace = meta.get("namespace")
        return _copy(
            self.store.apply(
                res, namespace, str(meta.get("name", "")), body, manager=manager, force=force
            )
        )

    def delete_object(self, resource: str, name: str, namespace: str | None = None) -> None:
        """Delete as a DELETE would: objects with finalizers only get a deletionTimestamp."""
        self.store.delete(self.resource(resource), namespace, name)

    def add_resource(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        *,
        namespaced: bool = True,
        status_subresource: bool = False,
        short_names: Iterable[str] = (),
        categories: Iterable[str] = (),
    ) -> ResourceDef:
        """Serve one more built-in-like resource (e.g. ``apps/v1 deployments``)."""
        res = ResourceDef(
            group,
            [version],
            plural,
            kind,
            namespaced=namespaced,
            status_subresource=status_subresource,
            tracks_generation=group != "",
            short_names=list(short_names),
            categories=list(categories),
        )
        self.store.register(res)
        return res

    def compact(self) -> None:
        """Forget the change history: older resourceVersions and continue tokens get 410."""
        self.store.compact()

    # ------------------------------------------------------------------ store listeners

    def _on_change(self, change: Change) -> None:
        for stream in list(self._watches):
            if stream.res.key == change.resource.key and not stream.closed:
                stream.push_change(change)

    def _on_resource_removed(self, res: ResourceDef) -> None:
        for stream in list(self._watches):
            if stream.res.key == res.key:
                stream.end()

    # ------------------------------------------------------------------ HTTP handling

    async def _handle(self, request: Request) -> Response:
        self.raw_requests.append(request)
        self.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                {key: values[0] for key, values in request.query.items() if values},
                _decode_body(request.body),
            )
        )
        injection = next((i for i in self._injections if i.matches(request)), None)
        if injection is not None:
            injection.hits += 1
            if injection.exhausted:
                self.remove_injection(injection)
            if injection.delay is not None:
                await trio.sleep(injection.delay)
            if injection.drop:
                raise DropConnection
            if injection.status is not None:
                return injection.response()
        if self.tokens is not None and not self._authorized(request):
            return _json(401, _status_body(401))
        try:
            return self._route(request)
        except StatusError as exc:
            return _json(exc.code, exc.status)

    def _authorized(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return (
            scheme.lower() == "bearer" and self.tokens is not None and token.strip() in self.tokens
        )

    def _route(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/livez", "/readyz"):
            return Response(200, b"ok", content_type="text/plain; charset=utf-8")
        if path == "/version":
            return _json(200, _VERSION)
        parts = [unquote(part) for part in path.strip("/").split("/")]
        groups = self.store.group_versions()
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(200, self._api_versions())
            group, version, rest = "", parts[1], parts[2:]
            if version not in groups.get("", []):
                return _page_not_found()
        elif parts[0] == "apis":
            if len(parts) == 1:
                return _json(200, self._group_list(groups))
            group = parts[1]
            if not group or group not in groups:
                return _page_not_found()
            if len(parts) == 2:
                return _json(
                    200,
                    {"kind": "APIGroup", "apiVersion": "v1", **self._group(group, groups[group])},
                )
            version, rest = parts[2], parts[3:]
            if version not in groups[group]:
                return _page_not_found()
        else:
            return _page_not_found()
        if not rest:
            if request.method != "GET":
                raise _method_not_allowed()
            return _json(200, self._resource_list(group, version))
        return self._serve_resource(request, group, version, rest)

    # ------------------------------------------------------------------ discovery

    def _api_versions(self) -> Obj:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self._port or 0}"}
            ],
        }

    @staticmethod
    def _group(group: str, versions: list[str]) -> Obj:
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    def _group_list(self, groups: Mapping[str, list[str]]) -> Obj:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(g, versions) for g, versions in groups.items() if g],
        }

    def _resource_list(self, group: str, version: str) -> Obj:
        resources = [
            entry
            for res in self.store.resources.values()
            if res.group == group and version in res.versions
            for entry in res.discovery_entries()
        ]
        head: Obj = {"kind": "APIResourceList"}
        if group:
            head["apiVersion"] = "v1"
        return {
            **head,
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    # ------------------------------------------------------------------ resources

    def _serve_resource(
        self, request: Request, group: str, version: str, rest: list[str]
    ) -> Response:
        watching = False
        if rest[0] == "watch":
            watching, rest = True, rest[1:]
        namespace: str | None = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (not group and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise resource_not_found()
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        res = self.store.find(group, version, plural)
        if res is None or (namespace is not None and not res.namespaced):
            raise resource_not_found()
        if res.namespaced and namespace is None and name is not None:
            raise resource_not_found()
        if subresource is not None and not (
            (subresource == "status" and res.status_subresource)
            or (subresource == "scale" and res.scale_subresource)
            or (subresource == "finalize" and res.key == ("", "namespaces"))
        ):
            raise resource_not_found()
        watching = watching or request.param("watch") in _TRUE
        method = request.method

        if name is None:
            if method == "GET":
                if watching:
                    return self._watch(request, res, version, namespace, None)
                return self._list(request, res, version, namespace)
            if method == "POST" and (namespace is not None or not res.namespaced):
                created = self.store.create(
                    res,
                    namespace,
                    self._body(request, res),
                    manager=request.param("fieldManager") or None,
                    default_manager=_default_manager(request),
                    version=version,
                )
                return _json(201, _present(created, res, version))
            if method == "DELETE" and (namespace is not None or not res.namespaced):
                items, metadata = self.store.delete_collection(
                    res,
                    namespace,
                    label_selector=request.param("labelSelector"),
                    field_selector=request.param("fieldSelector"),
                )
                return _json(200, self._list_body(res, version, items, metadata))
            raise _method_not_allowed()

        if subresource == "finalize":
            if method != "PUT":
                raise _method_not_allowed()
            return self._finalize_namespace(request, res, name)
        if subresource == "scale":
            return self._scale(request, res, namespace, name)
        if method == "GET":
            if watching and subresource is None:
                return self._watch(request, res, version, namespace, name)
            return _json(200, _present(self.store.get(res, namespace, name), res, version))
        if method == "PUT":
            replaced = self.store.replace(
                res,
                namespace,
                name,
                self._body(request, res),
                subresource=subresource,
                manager=request.param("fieldManager") or None,
                default_manager=_default_manager(request),
                version=version,
            )
            return _json(200, _present(replaced, res, version))
        if method == "PATCH":
            content_type = request.headers.get("content-type", "")
            # An apply that creates answers 201, like a POST.
            creating = (
                content_type.lower().startswith(APPLY_PATCH)
                and self.store.peek(res, namespace, name) is None
            )
            patched = self.store.patch(
                res,
                namespace,
                name,
                content_type,
                request.body,
                subresource=subresource,
                manager=request.param("fieldManager") or None,
                default_manager=_default_manager(request),
                version=version,
                force=request.param("force") in _TRUE,
            )
            return _json(201 if creating else 200, _present(patched, res, version))
        if method == "DELETE" and subresource is None:
            options = _decode_body(request.body)
            result = self.store.delete(
                res, namespace, name, options if isinstance(options, dict) else None
            )
            if result.get("kind") != "Status":
                result = _present(result, res, version)
            return _json(200, result)
        raise _method_not_allowed()

    def _scale(
        self, request: Request, res: ResourceDef, namespace: str | None, name: str
    ) -> Response:
        if request.method == "GET":
            return _json(200, self.store.get_scale(res, namespace, name))
        if request.method == "PUT":
            return _json(
                200, self.store.replace_scale(res, namespace, name, _decode_body(request.body))
            )
        if request.method == "PATCH":
            scale = self.store.patch_scale(
                res,
                namespace,
                name,
                request.headers.get("content-type", ""),
                request.body,
                manager=request.param("fieldManager") or None,
                force=request.param("force") in _TRUE,
            )
            return _json(200, scale)
        raise _method_not_allowed()

    @staticmethod
    def _body(request: Request, res: ResourceDef) -> Any:
        try:
            return _DECODE.decode(request.body)
        except msgspec.DecodeError as exc:
            raise StatusError(
                400,
                "BadRequest",
                f"the object provided is unrecognized (must be of type {res.kind}):"
                f" couldn't get version/kind; json parse error: {exc}",
            ) from None

    def _finalize_namespace(self, request: Request, res: ResourceDef, name: str) -> Response:
        body = self._body(request, res)
        current = clone(self.store.get(res, None, name))
        spec_finalizers = (
            (body.get("spec") or {}).get("finalizers") if isinstance(body, dict) else None
        )
        current.setdefault("spec", {})["finalizers"] = spec_finalizers or []
        if not spec_finalizers:
            current["spec"].pop("finalizers")
        rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if rv:
            current["metadata"]["resourceVersion"] = rv
        return _json(200, self.store.replace(res, None, name, current))

    def _list_body(self, res: ResourceDef, version: str, items: list[Obj], metadata: Obj) -> Obj:
        if res.custom:
            shown = [_present(obj, res, version) for obj in items]
        else:  # typed lists of the real server carry no kind/apiVersion in their items
            shown = [
                {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")} for obj in items
            ]
        return {
            "kind": res.list_kind,
            "apiVersion": res.api_version(version),
            "metadata": metadata,
            "items": shown,
        }

    def _list(
        self, request: Request, res: ResourceDef, version: str, namespace: str | None
    ) -> Response:
        items, metadata = self.store.list_objects(
            res,
            namespace,
            label_selector=request.param("labelSelector"),
            field_selector=request.param("fieldSelector"),
            limit=_int_param(request, "limit"),
            continue_token=request.param("continue"),
            resource_version=request.param("resourceVersion"),
        )
        return _json(200, self._list_body(res, version, items, metadata))

    def _watch(
        self,
        request: Request,
        res: ResourceDef,
        version: str,
        namespace: str | None,
        name: str | None,
    ) -> Response:
        field_text = request.param("fieldSelector")
        if name is not None:
            field_text = f"metadata.name={name}" + (f",{field_text}" if field_text else "")
        labels = LabelSelector.parse(request.param("labelSelector"))
        fields = FieldSelector.parse(field_text, res)
        timeout = _int_param(request, "timeoutSeconds")
        rv_text = request.param("resourceVersion") or ""
        rv: int | None = None
        if rv_text not in ("", "0"):
            try:
                rv = int(rv_text)
                if rv < 0:
                    raise ValueError(rv_text)
            except ValueError:
                raise StatusError(
                    500,
                    "",
                    f'resourceVersion: Invalid value: "{rv_text}": strconv.ParseUint: parsing'
                    f' "{rv_text}": invalid syntax',
                ) from None
        now = trio.current_time()
        stream = _WatchStream(
            path=request.path,
            res=res,
            version=version,
            namespace=namespace,
            labels=labels,
            fields=fields,
            deadline=now + timeout if timeout else math.inf,
            # Watches without a resourceVersion are served by etcd, which sends no bookmarks.
            bookmarks=rv_text != "" and request.param("allowWatchBookmarks") in _TRUE,
            bookmark_interval=self.bookmark_interval,
            current_rv=lambda: self.store.rv,
            start_rv=rv if rv is not None else self.store.rv,
        )
        pending = next(
            (p for p in self._pending_watch_errors if _matches(p[0], request.path)), None
        )
        if pending is not None:
            self._pending_watch_errors.remove(pending)
            stream.push_error(pending[1])
            return Response(200, stream)
        # Everything below is synchronous, so no change can slip in between the replay of
        # the past and the subscription to the future.
        if rv is None:
            for obj in self.store.iter_objects(res, namespace):
                if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj):
                    stream.push("ADDED", obj)
        else:
            try:
                changes = self.store.changes_since(res, rv)
            except StatusError as exc:  # too old: the real server says so inside a 200 stream
                stream.push_error(exc.status)
                return Response(200, stream)
            for change in changes:
                stream.push_change(change)
        self._watches.add(stream)
        return Response(200, stream)


def _int_param(request: Request, name: str) -> int | None:
    text = request.param(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise StatusError(400, "BadRequest", f"invalid {name}: {text!r}") from None


def _default_manager(request: Request) -> str:
    """The field manager of a write that names none: the User-Agent up to its first ``/``."""
    agent = request.headers.get("user-agent", "")
    return agent.split("/", 1)[0][:128] or DEFAULT_MANAGER


def _method_not_allowed() -> StatusError:
    reason, message = _REASONS[405]
    return StatusError(405, reason, message, {})


_VERSION = {
    "major": "1",
    "minor": "20",
    "gitVersion": "v1.20.2",
    "gitCommit": "faecb196815e248d3ecfb03c680a4507229c2a56",
    "gitTreeState": "fake",
    "buildDate": "2021-01-13T13:20:00Z",
    "goVersion": "go1.15.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
