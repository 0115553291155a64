"""The Kubernetes API client: credentials, retries, backoff, Retry-After, and the verbs.

Every request goes through one retry loop:

* credentials come from the :class:`Vault` on every attempt; an HTTP 401 invalidates them (the
  vault waits for a re-login or gives up with ``LoginError``) and the request is repeated with
  the next credentials, without consuming a retry;
* connection failures, timeouts, 5xx and 429 are retried after the delays of
  ``settings.networking.error_backoffs`` (re-iterated for every request, so each request starts
  from the first delay), each drawn with jitter (``backoff_jitter``, see ``backoff.py``); when
  they run out, the last error escalates;
* a server-requested delay (``Retry-After`` header, or ``details.retryAfterSeconds``) is never
  cut short, but never longer than ``max_retry_after``: the sleep is the longer of it and the
  backoff, or exactly the server's delay with ``enforce_retry_after``;
* after that sleep, a retry also takes a token of the client's **retry budget**
  (``retry_budget`` retries per second, ``retry_burst`` at once; ``ratelimit.py``), shared by
  all the client's requests: when an API server fails for everyone, the workers' retries come
  back at that pace instead of all at once. A retry waits for its token (cancellably), and
  never gives up for want of one: no request makes fewer attempts than ``error_backoffs``
  says, they are only spread out. A warning says when the budget runs dry, and an info line
  when it has room again;
* other 4xx errors escalate at once, and so do 3xx (redirects are never followed: see
  ``APIRedirectError``) and any other status outside 2xx;
* with ``settings.networking.qps`` set, every attempt (a watch: every connection) first takes
  a token of the client's rate limit (``ratelimit.py``), shared by all the client's requests;
  without it (the default) nothing is counted and nothing waits;
* responses are bounded (``max_response_size``, see ``transport/``), and one that breaks
  HTTP, exceeds a bound, or is not the JSON asked for is an ``APIProtocolError``, not retried:
  the same request would get the same answer.

Settings are read at call time: operators change them in startup handlers, after the client
exists.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sized
from typing import Any, Protocol, TypeAlias, TypedDict, Unpack

import msgspec
import trio

from trioperator._client.backoff import (
    RandomSource,
    capped_retry_after,
    default_random,
    jittered,
)
from trioperator._client.credentials import ConnectionInfo, Vault, VaultKey
from trioperator._client.errors import (
    APIConnectionError,
    APIError,
    APIGoneError,
    APIProtocolError,
    APIResponseTooLargeError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    error_from_response,
)
from trioperator._client.http import HTTPResponse, HTTPSession, SessionPool
from trioperator._client.ratelimit import TokenBucket
from trioperator._client.recent_writes import RecentWrites
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings

__all__ = ["APIClient", "Logger", "RequestObserver"]

_LOGGER = logging.getLogger(__name__)

Logger: TypeAlias = logging.Logger | logging.LoggerAdapter[Any]
Params: TypeAlias = Mapping[str, str] | None


class RequestOptions(TypedDict, total=False):
    """The keyword options of :meth:`APIClient.request`, which passes them to ``request_raw``."""

    params: Params
    payload: Any
    content_type: str | None
    timeout: float | None
    logger: Logger | None
    verb: str | None


MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
JSON = "application/json"


def _encode_extra(obj: Any) -> Any:
    # Read-only views of bodies (``Mapping``s that are not dicts) travel as plain objects.
    if isinstance(obj, Mapping):
        return dict(obj)
    raise NotImplementedError(f"Cannot encode {type(obj)} as JSON")


# Decoders and encoders compile their plans once; building them per request would waste it.
_JSON_DECODER = msgspec.json.Decoder()
_JSON_ENCODER = msgspec.json.Encoder(enc_hook=_encode_extra)

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
"""Kubernetes' verbs of the HTTP methods; listings and watches say theirs explicitly."""


class RequestObserver(Protocol):
    """Told of every attempt of every request (e.g. the operator's metrics).

    The client layer knows nothing of what observes it: the operator passes its metrics in.
    Called synchronously on the request's path, so it must be quick and must not raise.
    """

    def request_done(self, verb: str, code: int | None, seconds: float) -> None:
        """An attempt got HTTP ``code`` (``None``: no response) after ``seconds``.

        ``verb`` is Kubernetes' (get, list, watch, create, patch, update, delete), or the
        lowercase HTTP method of other requests.
        """


_THROTTLE_LOG_AFTER = 1.0
"""Waits for the rate limit this long or longer are logged (at DEBUG), as client-go does."""

_LIST_RESTARTS = 3
"""How often a paginated listing restarts when its continue token expires (HTTP 410)."""


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, APIProtocolError):
        return False  # the same exchange would break the same way
    return isinstance(exc, APIConnectionError | APIServerError | APITooManyRequestsError)


def _backoffs(value: float | Iterable[float]) -> tuple[Iterator[float], int | None]:
    """A fresh iterator over the configured backoffs and the number of attempts, if known."""
    if isinstance(value, int | float):
        return iter((float(value),)), 2
    count = len(value) + 1 if isinstance(value, Sized) else None
    return iter(value), count


class _RetryState:
    """The retry bookkeeping of one logical request (all its attempts)."""

    def __init__(
        self,
        settings: NetworkingSettings,
        log: Logger,
        rng: RandomSource,
        budget: Callable[[Logger], Awaitable[None]],
    ) -> None:
        self.backoffs, self.count = _backoffs(settings.error_backoffs)
        self.enforce_retry_after = settings.enforce_retry_after
        self.max_retry_after = settings.max_retry_after
        self.jitter = settings.backoff_jitter
        self.rng = rng
        self.logger = log
        self.budget = budget
        self.attempt = 0

    async def failed(self, exc: APIError | APIConnectionError, what: str) -> None:
        """Sleep before the next attempt, or re-raise ``exc`` if it must escalate."""
        if not _retriable(exc):
            raise exc
        self.attempt += 1
        label = f"#{self.attempt}/{self.count}" if self.count is not None else f"#{self.attempt}"
        backoff = next(self.backoffs, None)
        if backoff is None:
            self.logger.error(f"Request attempt {label} failed; escalating: {what} -> {exc!r}")
            raise exc
        delay = jittered(float(backoff), self.jitter, self.rng)
        retry_after = capped_retry_after(
            exc.retry_after if isinstance(exc, APIError) else None, self.max_retry_after
        )
        if retry_after is not None:
            delay = retry_after if self.enforce_retry_after else max(delay, retry_after)
        self.logger.error(f"Request attempt {label} failed; will retry: {what} -> {exc!r}")
        await trio.sleep(delay)
        await self.budget(self.logger)


def _encode(payload: Any) -> bytes | None:
    if payload is None:
        return None
    if isinstance(payload, bytes):
        return payload
    return _JSON_ENCODER.encode(payload)


def _decode(response: HTTPResponse, what: str = "") -> Any:
    body = response.body
    if not body:
        return None
    content_type = response.headers.get("content-type", "")
    if "json" in content_type or body.lstrip()[:1] in (b"{", b"["):
        try:
            return _JSON_DECODER.decode(body)
        except msgspec.DecodeError as exc:
            # The server's (or a proxy's) answer, not our bug: an error of the exchange.
            raise APIProtocolError(
                f"{what}: the response (HTTP {response.status}, {len(body)} bytes) is not"
                f" valid JSON: {exc}"
            ) from exc
    return body.decode("utf-8", errors="replace")


def _page_parts(
    page: dict[str, Any], what: str
) -> tuple[dict[str, Any], list[dict[str, Any]], str, str]:
    """A listing's metadata, items, kind and apiVersion, checked for their JSON types.

    A page of another shape (from a hostile or confused server) is an APIProtocolError, not an
    empty listing nor a crash of the watcher on the first item.
    """
    meta = page.get("metadata") or {}
    items = page.get("items") or []
    kind = page.get("kind") or ""
    api_version = page.get("apiVersion") or ""
    if not (
        isinstance(meta, dict)
        and isinstance(items, list)
        and isinstance(kind, str)
        and isinstance(api_version, str)
        and isinstance(meta.get("resourceVersion") or "", str)
        and isinstance(meta.get("continue") or "", str)
    ):
        raise APIProtocolError(f"{what}: the response is not a listing (a list of objects)")
    return meta, items, kind, api_version


def _expect_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise APIProtocolError(
            f"{what}: expected a JSON object in the response, got {type(value).__name__}"
        )
    return value


class APIClient:
    """Requests to the Kubernetes API with the credentials of a vault.

    Use as ``async with APIClient(vault, settings) as api:``, or call :meth:`aclose` at the end
    (it closes the HTTP connections).
    """

    def __init__(
        self,
        vault: Vault,
        settings: NetworkingSettings,
        *,
        logger: Logger | None = None,
        observer: RequestObserver | None = None,
        rng: RandomSource | None = None,
    ) -> None:
        self.vault = vault
        self.settings = settings
        self.logger: Logger = logger if logger is not None else _LOGGER
        self.observer = observer
        """Told of every request's outcome and latency (``None``: nobody is)."""
        self.rng: RandomSource = rng if rng is not None else default_random()
        """Where the jitter of every backoff is drawn from (the client's and its watchers'):
        tests give a seeded or scripted one, so that the sleeps are known."""
        self._sessions = SessionPool()
        self.recent_writes = RecentWrites()
        """Answers to the framework's own writes, for their watch echoes (see ``patch``)."""
        self._retry_budget: TokenBucket | None = None
        """The bucket of ``settings.networking.retry_budget`` (made at the first retry)."""
        self._budget_dry = False
        """Whether the last retry had to wait for the budget (a warning was logged)."""
        self._rate_limit: TokenBucket | None = None
        """The bucket of ``settings.networking.qps`` (made when first needed, and anew when the
        settings change); untouched while ``qps`` is None."""

    async def __aenter__(self) -> APIClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._sessions.aclose()

    async def _session(self) -> tuple[VaultKey, ConnectionInfo, HTTPSession]:
        # Every request waits for the network next: no extra trip through the scheduler here.
        await trio.lowlevel.checkpoint_if_cancelled()
        selected = self.vault.current()
        key, info = selected if selected is not None else await self.vault.select()
        trust_env = self.settings.trust_env or info.trust_env
        return key, info, self._sessions.get(info, trust_env=trust_env)

    async def _throttle(self, qps: float, method: str, path: str) -> None:
        """Wait for a token of the rate limit: ``qps`` per second, ``burst`` at once."""
        burst = self.settings.burst or max(1, math.ceil(qps))
        bucket = self._rate_limit
        if bucket is None or bucket.rate != qps or bucket.burst != burst:
            bucket = self._rate_limit = TokenBucket(qps, burst)
        waited = await bucket.take()
        if waited >= _THROTTLE_LOG_AFTER:
            self.logger.debug(
                f"Waited {waited:.3f}s for the client's rate limit (settings.networking.qps="
                f"{qps:g}, burst={burst}): {method} {path}"
            )

    async def _spend_retry(self, log: Logger) -> None:
        """Take a retry's token of the budget, waiting for it if the budget is spent."""
        rate = self.settings.retry_budget
        if rate is None:
            return
        burst = self.settings.retry_burst
        bucket = self._retry_budget
        if bucket is None or bucket.rate != rate or bucket.burst != burst:
            bucket = self._retry_budget = TokenBucket(rate, burst)
        wait = bucket.delay()
        if wait > 0 and not self._budget_dry:
            self._budget_dry = True
            log.warning(
                f"The retry budget is spent (settings.networking.retry_budget={rate:g} per second,"
                f" retry_burst={burst}): retries of failed requests wait for their turn,"
                f" {wait:.3f}s for this one."
            )
        elif wait <= 0 and self._budget_dry:
            self._budget_dry = False
            log.info("The retry budget has room again: retries go out without waiting.")
        await bucket.take()

    async def _unauthorized(
        self, key: VaultKey, info: ConnectionInfo, exc: APIUnauthorizedError
    ) -> None:
        await self._sessions.discard(info)
        await self.vault.invalidate(key, info, exc=exc)

    # ------------------------------------------------------------------ raw requests

    def retry_delay(self, step: float) -> float:
        """A sleep before retrying something that failed, for a step of ``step`` seconds: the
        step stretched by the settings' jitter (see ``backoff.py``), drawn from this client's
        random source, so that replicas failing together do not retry in lock-step."""
        return jittered(step, self.settings.backoff_jitter, self.rng)

    async def request_raw(
        self,
        method: str,
        path: str,
        *,
        params: Params = None,
        payload: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- per attempt, see docstring
        logger: Logger | None = None,
        verb: str | None = None,
    ) -> HTTPResponse:
        """Send a request with retries; return the successful (2xx) response as is.

        ``payload`` is JSON-encoded unless it is already ``bytes``. ``timeout`` bounds each
        attempt (default: ``settings.request_timeout``). ``verb`` names the request for the
        observer (default: Kubernetes' verb of the method).
        """
        content = _encode(payload)
        headers = None
        if content is not None:
            headers = {"Content-Type": content_type or JSON}
        observer = self.observer
        if observer is not None and verb is None:
            verb = _VERBS.get(method, method.lower())
        # Formed on the first failure only: most requests succeed at once.
        retries: _RetryState | None = None
        while True:
            qps = self.settings.qps
            if qps is not None:
                await self._throttle(qps, method, path)
            key, info, session = await self._session()
            try:
                started = trio.current_time()
                try:
                    response = await session.request(
                        method,
                        path,
                        params=params,
                        content=content,
                        headers=headers,
                        timeout=timeout if timeout is not None else self.settings.request_timeout,
                        connect_timeout=self.settings.connect_timeout,
                        max_size=self.settings.max_response_size,
                    )
                except APIConnectionError:
                    if observer is not None:
                        observer.request_done(verb or "", None, trio.current_time() - started)
                    raise
                if observer is not None:
                    observer.request_done(
                        verb or "", response.status, trio.current_time() - started
                    )
                # Only a 2xx is an answer: a 3xx (never followed) or any other is an error, so
                # that its body is never taken for the resource (e.g. as an empty list).
                if not 200 <= response.status < 300:
                    raise error_from_response(response.status, response.body, response.headers)
                return response
            except APIUnauthorizedError as exc:
                await self._unauthorized(key, info, exc)
            except (APIError, APIConnectionError) as exc:
                if retries is None:
                    retries = _RetryState(
                        self.settings, logger or self.logger, self.rng, self._spend_retry
                    )
                await retries.failed(exc, f"{method} {session.url(path, params)}")

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Any:
        """Send a request with retries (``options`` as for :meth:`request_raw`); return the
        decoded JSON body (``None`` if empty).

        A body that is not valid JSON is an :class:`APIProtocolError`.
        """
        response = await self.request_raw(method, path, **options)
        return _decode(response, f"{method} {path}")

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Params = None,
        connect_timeout: float | None = None,
        logger: Logger | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """GET a streamed response (a watch); give its body as an async iterator of lines.

        Establishing the stream is retried like any request (401, 5xx, 429, connection errors);
        once it is established, errors while reading it end it with an exception and are the
        caller's to handle. No total or read timeout applies: bound it with cancel scopes.
        """
        retries = _RetryState(self.settings, logger or self.logger, self.rng, self._spend_retry)
        if connect_timeout is None:
            connect_timeout = self.settings.connect_timeout
        observer = self.observer
        while True:
            qps = self.settings.qps
            if qps is not None:
                await self._throttle(qps, "GET", f"{path} (a watch)")
            key, info, session = await self._session()
            what = f"GET {session.url(path, params)}"
            established = False
            started = trio.current_time()
            try:
                async with session.stream(
                    "GET",
                    path,
                    params=params,
                    connect_timeout=connect_timeout,
                    max_line=self.settings.max_response_size,
                ) as response:
                    if observer is not None:
                        observer.request_done(
                            "watch", response.status, trio.current_time() - started
                        )
                    if not 200 <= response.status < 300:
                        body = await response.read()
                        raise error_from_response(response.status, body, response.headers)
                    established = True
                    yield response.lines()
                    return
            except APIUnauthorizedError as exc:
                if established:
                    raise
                await self._unauthorized(key, info, exc)
            except (APIError, APIConnectionError) as exc:
                if established:
                    raise
                if observer is not None and isinstance(exc, APIConnectionError):
                    observer.request_done("watch", None, trio.current_time() - started)
                await retries.failed(exc, what)

    # ------------------------------------------------------------------ verbs

    async def get(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        name: str,
        subresource: str | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """One object (or its subresource)."""
        path = resource.get_url(namespace=namespace, name=name, subresource=subresource)
        return _expect_dict(await self.request("GET", path, logger=logger), f"GET {path}")

    async def list_objs(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        logger: Logger | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """All objects of a collection and the listing's ``resourceVersion``.

        With ``limit``, the listing is fetched in pages of that size (``continue`` tokens); if a
        token expires midway (HTTP 410), the listing starts over. Items get ``apiVersion`` and
        ``kind`` filled in, since Kubernetes omits them inside lists.
        """
        items: list[dict[str, Any]] = []

        async def collect(page: list[dict[str, Any]], restarted: bool) -> None:
            if restarted:
                items.clear()
            items.extend(page)

        version = await self.list_pages(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            logger=logger,
            on_page=collect,
        )
        return items, version

    async def list_pages(
        self,
        resource: Resource,
        *,
        on_page: Callable[[list[dict[str, Any]], bool], Awaitable[None]],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        logger: Logger | None = None,
    ) -> str:
        """List a collection page by page, handing each page to ``on_page`` as it arrives.

        Returns the listing's ``resourceVersion``. Unlike :meth:`list_objs`, the pages are not
        accumulated: a caller that consumes them one at a time never holds more than one page
        of decoded objects (a listing of many objects is otherwise the largest allocation of an
        operator's life). ``on_page(items, restarted)`` gets ``restarted=True`` with the first
        page after a ``continue`` token expired midway (HTTP 410) and the listing started over:
        the pages given before are superseded by the new listing.

        A page over ``settings.networking.max_response_size`` is asked for again with half the
        ``limit`` (down to one object), the listing going on from the same place; a page that
        is not a list (a JSON object with a list of objects in ``items``) is an
        :class:`APIProtocolError`.
        """
        path = resource.get_url(namespace=namespace)
        what = f"GET {path}"
        log = logger or self.logger
        restarts = 0
        restarted = False
        while True:
            version = ""
            token: str | None = None
            try:
                while True:
                    params: dict[str, str] = {}
                    if label_selector:
                        params["labelSelector"] = label_selector
                    if field_selector:
                        params["fieldSelector"] = field_selector
                    if limit:
                        params["limit"] = str(limit)
                    if token:
                        params["continue"] = token
                    try:
                        answer = await self.request(
                            "GET", path, params=params or None, logger=logger, verb="list"
                        )
                    except APIResponseTooLargeError as exc:
                        # Pages of many big objects may outgrow the limit: smaller ones do not
                        # (a page of one object is at most the object). A server that sends too
                        # much whatever is asked is refused after log2(limit) tries.
                        if not limit or limit <= 1:
                            raise
                        limit = max(1, limit // 2)
                        log.warning(
                            f"A page of the listing of {resource} is too large ({exc});"
                            f" asking for smaller pages (limit={limit})."
                        )
                        continue
                    page = _expect_dict(answer, what)
                    meta, items, list_kind, api_version = _page_parts(page, what)
                    version = meta.get("resourceVersion") or version
                    kind = list_kind[:-4] if list_kind.endswith("List") else resource.kind
                    kind = kind or resource.kind
                    api_version = api_version or resource.api_version
                    try:
                        for item in items:
                            item.setdefault("apiVersion", api_version)
                            item.setdefault("kind", kind)
                    except AttributeError:  # only dicts have it: an item that is no object
                        raise APIProtocolError(
                            f"{what}: the listing has an item that is not a JSON object"
                        ) from None
                    token = meta.get("continue") or None
                    del page
                    await on_page(items, restarted)
                    restarted = False
                    del items
                    if token is None:
                        return version
            except APIGoneError:
                if token is None or restarts >= _LIST_RESTARTS:
                    raise
                restarts += 1
                restarted = True
                log.warning(f"The listing of {resource} expired midway; listing it again.")

    async def create(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        body: Mapping[str, Any],
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Create an object; the namespace defaults to the body's ``metadata.namespace``."""
        if namespace is None and resource.namespaced:
            namespace = (body.get("metadata") or {}).get("namespace")
        path = resource.get_url(namespace=namespace)
        result = await self.request("POST", path, payload=body, logger=logger)
        return _expect_dict(result, f"POST {path}")

    async def patch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        name: str,
        payload: Mapping[str, Any] | list[dict[str, Any]],
        subresource: str | None = None,
        json_patch: bool = False,
        logger: Logger | None = None,
        echo_after: str | None = None,
    ) -> dict[str, Any]:
        """Patch an object (or its subresource, e.g. ``status``); return the patched object.

        A dict is a merge-patch; a list of operations (or ``json_patch=True``) is a JSON-patch.

        ``echo_after``: the ``resourceVersion`` the caller knows the object by, given when the
        object comes back on a watch stream of this client and the returned dict is only read,
        never changed, by the caller. If the write makes a new version (an event), the answer
        is handed on as the object of that event instead of decoding it (see
        ``recent_writes.py``).
        """
        path = resource.get_url(namespace=namespace, name=name, subresource=subresource)
        content_type = JSON_PATCH if json_patch or isinstance(payload, list) else MERGE_PATCH
        response = await self.request_raw(
            "PATCH", path, payload=payload, content_type=content_type, logger=logger
        )
        result = _expect_dict(_decode(response, f"PATCH {path}"), f"PATCH {path}")
        if echo_after is not None:
            self.recent_writes.remember(response.body, result, unless=echo_after)
        return result

    async def delete(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        name: str,
        propagation_policy: str | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any] | None:
        """Delete an object; return what the server returned (the object, or a Status)."""
        path = resource.get_url(namespace=namespace, name=name)
        params = {"propagationPolicy": propagation_policy} if propagation_policy else None
        result = await self.request("DELETE", path, params=params, logger=logger)
        return result if isinstance(result, dict) else None
