"""Where the API client's credentials come from, and where rejected ones are reported.

Inside an operator it is the operator's own :class:`~trioperator._client.credentials.Vault`: the
client logs in as the operator does, and a 401 invalidates the credentials in that same vault
(so the operator's login handlers run again, once, for both). The vault lives in the operator's
trio run; sync code in worker threads reaches it through :class:`VaultFromThread`. Scripts and
tests outside an operator give fixed credentials (:class:`KnownCredentials`), usable on any
async library or none.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable
from typing import Protocol

import trio

from trioperator._client.credentials import ConnectionInfo, LoginError, Vault, VaultKey

__all__ = ["AsyncCredentials", "KnownCredentials", "SyncCredentials", "VaultFromThread"]


class AsyncCredentials(Protocol):
    """The credentials of an async client (a :class:`Vault` is one)."""

    async def select(self) -> tuple[VaultKey, ConnectionInfo]:
        """The best credentials now, waiting for a login if there are none."""
        ...

    async def invalidate(
        self, key: VaultKey, info: ConnectionInfo, *, exc: BaseException | None = None
    ) -> None:
        """Never use ``info`` again; return when other credentials are there (or raise)."""
        ...


class SyncCredentials(Protocol):
    """The credentials of a sync client."""

    def select_sync(self) -> tuple[VaultKey, ConnectionInfo]: ...

    def invalidate_sync(
        self, key: VaultKey, info: ConnectionInfo, *, exc: BaseException | None = None
    ) -> None: ...


class KnownCredentials:
    """Fixed credentials, the highest priority first; a rejected one is never used again.

    No login handlers run: once all are rejected, requests fail with :class:`LoginError`.
    It never waits, so it works under trio, asyncio (the async methods never suspend) and
    in threads alike.
    """

    def __init__(self, infos: Iterable[ConnectionInfo]) -> None:
        ordered = sorted(infos, key=lambda info: -info.priority)
        if not ordered:
            raise LoginError("No credentials were given to the API client.")
        self._items = [(VaultKey(f"known-{index}"), info) for index, info in enumerate(ordered)]
        self._rejected: set[Hashable] = set()

    def select_sync(self) -> tuple[VaultKey, ConnectionInfo]:
        for key, info in self._items:
            if key not in self._rejected:
                return key, info
        raise LoginError("Every given set of credentials was rejected (HTTP 401).")

    def invalidate_sync(
        self, key: VaultKey, info: ConnectionInfo, *, exc: BaseException | None = None
    ) -> None:
        self._rejected.add(key)
        if len(self._rejected) >= len(self._items):
            raise LoginError("Every given set of credentials was rejected (HTTP 401).") from exc

    async def select(self) -> tuple[VaultKey, ConnectionInfo]:
        return self.select_sync()

    async def invalidate(
        self, key: VaultKey, info: ConnectionInfo, *, exc: BaseException | None = None
    ) -> None:
        self.invalidate_sync(key, info, exc=exc)


class VaultFromThread:
    """The operator's vault for sync code in worker threads: each call runs in the trio run."""

    def __init__(self, vault: Vault, token: trio.lowlevel.TrioToken) -> None:
        self._vault = vault
        self._token = token

    def select_sync(self) -> tuple[VaultKey, ConnectionInfo]:
        # The vault is not thread-safe: even a read (which drops expired items) runs in trio.
        return trio.from_thread.run(self._vault.select, trio_token=self._token)

    def invalidate_sync(
        self, key: VaultKey, info: ConnectionInfo, *, exc: BaseException | None = None
    ) -> None:
        call = functools.partial(self._vault.invalidate, key, info, exc=exc)
        trio.from_thread.run(call, trio_token=self._token)
