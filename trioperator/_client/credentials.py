"""Connection credentials and the vault that hands them out to API requests.

``ConnectionInfo`` says *where* the API server is and *how* to prove who we are; it never says
how those values were obtained (that is the job of the ``on.login`` handlers and of
``trioperator._client.config``).

The ``Vault`` keeps the credentials that are currently believed to work. Its lifecycle, and who
calls what:

1. The runtime creates one vault per operator (possibly pre-populated by the embedding code).
2. The runtime's *authenticator* task loops forever::

       while True:
           await vault.wait_for_emptiness()      # a login is needed (initially, or after 401s)
           try:
               infos = <run the on.login handlers>
           except Exception as exc:
               vault.fail(exc)                   # waiters get LoginError
           else:
               await vault.populate(infos)       # waiters get the new credentials

3. The API client calls ``select()`` before each request. It returns the best valid item at
   once, or, if there is none, requests a login and blocks until the authenticator finished
   a login round.
4. On HTTP 401 the API client calls ``invalidate(key, info, exc=...)``: that exact
   ``ConnectionInfo`` is remembered as failed forever (so a login handler that keeps returning
   the same stale token cannot cause an endless login loop), and if nothing valid is left the
   caller blocks until the next login round. Then it calls ``select()`` again and retries.
5. Credentials whose ``expiration`` has passed (wall clock, UTC) are dropped lazily whenever
   the vault is consulted; they are simply forgotten, not blacklisted.
6. At the very end of the operator, ``close()`` stops all further logins: whoever still waits
   for credentials gets ``LoginError``; the remaining valid credentials stay usable.

Everything here runs in one trio run and is only mutated synchronously between checkpoints, so
no locks are needed. Waiting uses a ``trio.Event`` that is replaced on every state change, so
every wait is an ordinary cancellable trio wait.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import os
import ssl
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from typing import NewType

import trio

from trioperator._client.tls import build_ssl_context
from trioperator._util import clock

VaultKey = NewType("VaultKey", str)

_NO_CREDENTIALS_HINT = (
    "Add an @on.login handler that returns a ConnectionInfo "
    "(e.g. via login_with_kubeconfig() or login_with_service_account())."
)


class LoginError(Exception):
    """No usable credentials can be obtained: none were provided, or all were rejected."""


# Fields whose values must not end up in logs, tracebacks or reprs.
_SECRET_FIELDS = frozenset({"password", "token", "private_key_data"})
# Fields that are long blobs: shown as their size only, to keep reprs readable.
_BLOB_FIELDS = frozenset({"ca_data", "certificate_data"})


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class ConnectionInfo:
    """One API endpoint with one set of credentials and TLS/proxy options.

    It is immutable and hashable: the vault remembers rejected credentials by their value.
    ``expiration`` is normalised to an aware UTC datetime (naive values are taken as UTC, as in
    Kopf). Text given for the ``*_data`` fields is encoded to bytes, path-like objects for the
    ``*_path`` fields are turned into strings.
    """

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = None
    insecure: bool | None = None
    username: str | None = None
    password: str | None = None
    scheme: str | None = None
    token: str | None = None
    certificate_path: str | None = None
    certificate_data: bytes | None = None
    private_key_path: str | None = None
    private_key_data: bytes | None = None
    default_namespace: str | None = None
    priority: int = 0
    expiration: datetime.datetime | None = None
    proxy_url: str | None = None
    tls_server_name: str | None = None
    trust_env: bool = False
    """Honour ``HTTP(S)_PROXY``, ``NO_PROXY``, ``.netrc`` from the environment (Kopf's field)."""

    def __post_init__(self) -> None:
        # Kopf accepts str for data blobs and PathLike for paths; the rest of trioperator relies
        # on the declared types, so coerce once here. Values are read as `object` on purpose:
        # the annotations say what we store, not what callers may pass.
        for name in ("ca_data", "certificate_data", "private_key_data"):
            data: object = getattr(self, name)
            if isinstance(data, str):
                data = data.encode("utf-8")
            if isinstance(data, bytes):
                object.__setattr__(self, name, _pem_from_base64(data))
        for name in ("ca_path", "certificate_path", "private_key_path"):
            path: object = getattr(self, name)
            if isinstance(path, os.PathLike):
                object.__setattr__(self, name, os.fsdecode(path))
        if self.expiration is not None:
            if self.expiration.tzinfo is None:
                utc = self.expiration.replace(tzinfo=datetime.UTC)
            else:
                utc = self.expiration.astimezone(datetime.UTC)
            object.__setattr__(self, "expiration", utc)

    def __repr__(self) -> str:
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name != "server" and value == field.default:
                continue
            if field.name in _SECRET_FIELDS:
                parts.append(f"{field.name}=<hidden>")
            elif field.name in _BLOB_FIELDS:
                parts.append(f"{field.name}=<{len(value)} bytes>")
            else:
                parts.append(f"{field.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def is_expired(self, now: datetime.datetime) -> bool:
        """Whether the credentials are past their expiration at ``now`` (an aware datetime)."""
        return self.expiration is not None and self.expiration <= now

    def as_http_headers(self) -> dict[str, str]:
        """The ``Authorization`` header: basic auth, else the token and/or scheme (as Kopf)."""
        if self.username and self.password:
            pair = f"{self.username}:{self.password}".encode()
            return {"Authorization": f"Basic {base64.b64encode(pair).decode('ascii')}"}
        if self.scheme and self.token:
            return {"Authorization": f"{self.scheme} {self.token}"}
        if self.scheme:
            return {"Authorization": self.scheme}
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        return {}

    def as_ssl_context(self) -> ssl.SSLContext:
        """The TLS context for these credentials: the CA, the client certificate, ``insecure``.

        Inline certificate and key data are written to private temporary files for the moment
        of loading (Python's ``ssl`` reads them from files only) and removed right after.
        """
        return build_ssl_context(self)

    def as_aiohttp_basic_auth(self) -> None:
        """Kopf's deprecated helper; the basic auth comes from ``as_http_headers()``."""
        warnings.warn(
            "as_aiohttp_basic_auth() is deprecated: the basic auth comes from as_http_headers().",
            DeprecationWarning,
            stacklevel=2,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AiohttpSession:
    """Kopf's way to hand it a ready-made ``aiohttp`` session; trioperator cannot use one.

    trioperator does not talk HTTP through aiohttp (nor through asyncio at all), so such a
    session could never be used. Kopf documents that returning this class fails loudly when
    the HTTP library changes; here it fails when it is made, with what to do instead.
    """

    aiohttp_session: object
    server: str
    priority: int = 0
    default_namespace: str | None = None
    expiration: datetime.datetime | None = None

    def __post_init__(self) -> None:
        raise TypeError(
            "trioperator does not use aiohttp, so it cannot use a custom aiohttp session. "
            "Return a ConnectionInfo from the login handler instead (its token, scheme, "
            "certificates, proxy_url and trust_env cover what the session would configure)."
        )


def _pem_from_base64(data: bytes) -> bytes:
    """The PEM inside base64 text (as in kubeconfigs' ``*-data``), or ``data`` unchanged.

    Kopf accepts both PEM and base64-encoded PEM in the ``*_data`` fields; only base64 that
    decodes to PEM is decoded, so PEM and DER are never misread.
    """
    if data.lstrip().startswith(b"-----BEGIN"):
        return data
    try:
        decoded = base64.b64decode(b"".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return data
    return decoded if decoded.lstrip().startswith(b"-----BEGIN") else data


def utcnow() -> datetime.datetime:
    """The wall-clock time against which credentials' expiration is checked."""
    return clock.now()


class Vault:
    """The credentials currently believed to be valid, keyed by the login source's name.

    See the module docstring for the lifecycle. ``now`` is a wall-clock source for expiration
    checks (tests pass a fixed one); it must return aware datetimes.
    """

    def __init__(
        self,
        items: Mapping[str, ConnectionInfo] | None = None,
        *,
        now: Callable[[], datetime.datetime] = utcnow,
    ) -> None:
        self._now = now
        self._current: dict[VaultKey, ConnectionInfo] = {}
        # Whether any current item has an expiration: if none has, there is nothing to drop,
        # and the clock is not read for every request.
        self._may_expire = False
        self._invalid: set[ConnectionInfo] = set()
        self._failure: BaseException | None = None
        self._closed = False
        # A login is needed and not yet answered by populate()/fail(). This is a separate flag
        # from emptiness: after a login round that gave nothing, the vault stays empty but no
        # new login starts until somebody needs credentials again (no busy loop of logins).
        self._login_needed = False
        # Login rounds finished so far (populate() or fail() calls); waiters compare it.
        self._rounds = 0
        self._changed = trio.Event()
        if items:
            self._accept(items)
        self._login_needed = not self._has_valid()

    # ---------------------------------------------------------------- queries (synchronous)

    def is_empty(self) -> bool:
        """Whether there is no valid (known, unexpired, not rejected) item."""
        return not self._has_valid()

    def items(self) -> list[tuple[VaultKey, ConnectionInfo]]:
        """The valid items, the highest priority first (ties keep their insertion order)."""
        self._drop_expired()
        return sorted(self._current.items(), key=lambda kv: -kv[1].priority)

    async def __aiter__(self) -> AsyncIterator[tuple[VaultKey, ConnectionInfo]]:
        # A snapshot: iterating never waits for a login and is not disturbed by changes.
        for key, info in self.items():
            yield key, info

    # ---------------------------------------------------------------- for the authenticator

    async def populate(self, items: Mapping[str, ConnectionInfo]) -> None:
        """Add or replace credentials; this finishes the current login round (if any).

        Items that were rejected before (exactly equal ``ConnectionInfo``) and items that are
        already expired are ignored. If anything new was accepted, a previous ``fail()`` is
        forgotten. Waiters wake up: they either find credentials or get ``LoginError``.
        """
        await trio.lowlevel.checkpoint()
        if self._accept(items):
            self._failure = None
        self._login_needed = False
        self._rounds += 1
        self._notify()

    def fail(self, exc: BaseException) -> None:
        """Finish the current login round as failed: waiters get ``LoginError`` from ``exc``.

        The failure also applies to later callers that find the vault empty, until a
        ``populate()`` brings new credentials.
        """
        self._failure = exc
        self._login_needed = False
        self._rounds += 1
        self._notify()

    async def wait_for_emptiness(self) -> None:
        """Return once the vault is empty and somebody needs credentials (a login is due).

        Initially an empty vault needs a login at once. After ``close()`` no login is ever due,
        so this only ends by cancellation.
        """
        await trio.lowlevel.checkpoint()
        while not self._login_needed or self._closed:
            await self._changed.wait()

    async def wait_for_readiness(self) -> None:
        """Return once there is at least one valid item; raise ``LoginError`` if closed."""
        await trio.lowlevel.checkpoint()
        while not self._has_valid():
            if self._closed:
                raise LoginError("The credentials vault is closed.")
            await self._changed.wait()

    def close(self) -> None:
        """Stop all logins; current and future waiters for credentials get ``LoginError``."""
        self._closed = True
        self._login_needed = False
        self._notify()

    # ---------------------------------------------------------------- for the API client

    def current(self) -> tuple[VaultKey, ConnectionInfo] | None:
        """The valid item with the highest priority now; ``None`` if there is none (then
        :meth:`select` waits for a login). For callers that checkpoint right after anyway."""
        self._drop_expired()
        if len(self._current) == 1:  # the usual case: one source, nothing to sort
            return next(iter(self._current.items()))
        valid = self.items()
        return valid[0] if valid else None

    async def select(self) -> tuple[VaultKey, ConnectionInfo]:
        """The valid item with the highest priority; wait for a login round if there is none.

        Raises ``LoginError`` if the login round gives nothing new, if the login has failed
        (``fail()``), or if the vault is closed while it is empty.
        """
        await trio.lowlevel.checkpoint()
        while True:
            valid = self.items()
            if valid:
                return valid[0]
            await self._wait_for_login(cause=None)

    async def invalidate(
        self,
        key: VaultKey,
        info: ConnectionInfo,
        *,
        exc: BaseException | None = None,
    ) -> None:
        """Reject ``info`` forever (e.g. after HTTP 401) and wait for a re-login if needed.

        The item under ``key`` is removed only if it is still ``info``: another request may
        have already invalidated it and a login may have replaced it with something new.
        Returns when some valid item exists (the caller then selects again); raises
        ``LoginError`` (chained from ``exc``) if the re-login gives nothing new.
        """
        # Record synchronously, before any checkpoint: even a cancelled caller must not let
        # known-bad credentials stay in use.
        self._invalid.add(info)
        if self._current.get(key) == info:
            del self._current[key]
        if not self._has_valid() and self._failure is None:
            self._request_login()
        await trio.lowlevel.checkpoint()
        while not self._has_valid():
            await self._wait_for_login(cause=exc)

    # ---------------------------------------------------------------- internals

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _request_login(self) -> None:
        if not self._login_needed and not self._closed:
            self._login_needed = True
            self._notify()

    def _raise_if_hopeless(self, cause: BaseException | None) -> None:
        # Only called while there are no valid items.
        if self._closed:
            raise LoginError("The credentials vault is closed; no more logins.") from cause
        if self._failure is not None:
            raise LoginError(f"Login has failed: {self._failure!r}") from self._failure

    async def _wait_for_login(self, *, cause: BaseException | None) -> None:
        """Wait until a login round brings valid credentials, or raise ``LoginError``."""
        self._raise_if_hopeless(cause)
        self._request_login()
        started = self._rounds
        while True:
            await self._changed.wait()
            if self._has_valid():
                return
            self._raise_if_hopeless(cause)
            # A round has ended with nothing usable. If another round has been requested
            # meanwhile (our wake-up came late), wait for that one too.
            if self._rounds != started and not self._login_needed:
                raise LoginError(
                    f"Ran out of valid credentials: the login gave nothing new. "
                    f"{_NO_CREDENTIALS_HINT}"
                ) from cause

    def _accept(self, items: Mapping[str, ConnectionInfo]) -> bool:
        """Store usable items; return whether anything new was stored."""
        now = self._now()
        changed = False
        for name, info in items.items():
            checked: object = info
            if not isinstance(checked, ConnectionInfo):
                raise TypeError(f"Vault items must be ConnectionInfo, got {type(checked)!r}.")
            key = VaultKey(str(name))
            if info in self._invalid or info.is_expired(now):
                continue
            if self._current.get(key) != info:
                self._current[key] = info
                self._may_expire = self._may_expire or info.expiration is not None
                changed = True
        return changed

    def _drop_expired(self) -> None:
        if not self._may_expire:
            return
        now = self._now()
        for key, info in list(self._current.items()):
            if info.is_expired(now):
                del self._current[key]
        self._may_expire = any(info.expiration is not None for info in self._current.values())

    def _has_valid(self) -> bool:
        self._drop_expired()
        return bool(self._current)
