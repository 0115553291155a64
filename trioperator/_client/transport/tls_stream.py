"""TLS for the HTTP transport (:mod:`~trioperator._client.transport`): :class:`TLSStream`.

Contexts are built in :mod:`~trioperator._client.tls`; this module only moves bytes through them.
"""

from __future__ import annotations

import functools
import os
import socket as stdlib_socket
import ssl
from collections.abc import Callable
from typing import Final, TypeVar

import trio

__all__ = ["TLSStream"]

_READ_SIZE: Final = 65536
_RECORD: Final = 16384  # the largest TLS record's plaintext: more may follow a full one
_T = TypeVar("_T")


class _EndOfStream(Exception):
    """Held by :class:`TLSStream` to give the end of the stream at the next read."""


class TLSStream(trio.abc.Stream):
    """TLS on a non-blocking ``ssl.SSLSocket``, waiting for the socket with trio.

    Why not ``trio.SSLStream``: it runs TLS in memory buffers and moves every byte through a
    second stream, with a lock and a retry loop per call, so each read or write took several
    trips through the scheduler; here a write is one attempt on the socket, and a wait for it
    only if OpenSSL needs the network (either way round: TLS may need to write to read, or
    read to write); a read with nothing decrypted in OpenSSL waits for the socket first. As
    ``trio.SSLStream(https_compatible=True)``, a TCP close without TLS close_notify reads as
    an end of stream (``suppress_ragged_eofs``).
    """

    __slots__ = ("_held", "read_ahead", "socket")

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.socket = sock
        # Whether a read takes the records received after the first one too (for streams of
        # many small records), or only after a full-size one (for single answers).
        self.read_ahead = True
        # What ended a read after some data was read already: given at the next read.
        self._held: BaseException | None = None

    @classmethod
    async def wrap(
        cls,
        tcp: trio.SocketStream,
        context: ssl.SSLContext,
        server_name: str,
        *,
        session: ssl.SSLSession | None = None,
    ) -> TLSStream:
        """Take over the socket of ``tcp`` (connected) and do the TLS handshake on it.

        ``session``: one of this context's earlier sessions with the same server, to resume
        (the server does a full handshake instead if it does not take it).
        """
        trio_socket = tcp.socket
        family, kind, proto = trio_socket.family, trio_socket.type, trio_socket.proto
        fd = trio_socket.detach()
        try:
            raw = stdlib_socket.socket(family, kind, proto, fileno=fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            raw.setblocking(False)
            sock = context.wrap_socket(
                raw,
                server_hostname=server_name,
                do_handshake_on_connect=False,
                suppress_ragged_eofs=True,
                session=session,
            )
        except BaseException:
            raw.close()
            raise
        stream = cls(sock)
        try:
            await stream._retry(sock.do_handshake)
        except BaseException:
            stream.close()
            raise
        return stream

    async def _retry(self, operation: Callable[[], _T]) -> _T:
        """Run a non-blocking TLS operation until it is done: one scheduler trip if no wait."""
        await trio.lowlevel.checkpoint_if_cancelled()
        sock = self.socket
        waited = False
        while True:
            try:
                result = operation()
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(sock)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(sock)
            else:
                break
            waited = True
        if not waited:  # a wait is a schedule point already; else, be one as trio's streams are
            await trio.lowlevel.cancel_shielded_checkpoint()
        return result

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        size = _READ_SIZE if max_bytes is None else max_bytes
        held, self._held = self._held, None
        if held is not None:
            await trio.lowlevel.checkpoint()
            if isinstance(held, _EndOfStream):
                return b""
            raise held
        sock = self.socket
        first: bytes | None = None
        if not sock.pending():
            # Nothing decrypted waits in OpenSSL: a reader comes here once it has taken all
            # there was (an answer not sent yet, the next watch event), so a read now would
            # almost always fail (an SSL call, a syscall, an exception) before the wait anyway.
            if sock.fileno() < 0:
                raise trio.ClosedResourceError("the TLS stream is closed")
            await trio.lowlevel.wait_readable(sock)
            first = self._read_now(size)
        # Else (or if what arrived is not a whole record yet), as any non-blocking read.
        data = first if first is not None else await self._retry(functools.partial(sock.recv, size))
        if not data or len(data) >= size or not (self.read_ahead or len(data) >= _RECORD):
            return data
        # One read gives one TLS record, and the server sends every watch event (or a piece
        # of a long body) as a record of its own: the records already received are read now,
        # together, rather than each one with a trip through the scheduler and the parsers.
        # (Not after a short record on a connection of single answers: nothing more comes.)
        parts = [data]
        room = size - len(data)
        while room > 0:
            try:
                more = sock.recv(room)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break  # nothing more for now
            except OSError as exc:
                self._held = exc  # after the data read before it, as it happened
                break
            if not more:
                self._held = _EndOfStream()  # the end comes after the data, as it did
                break
            parts.append(more)
            room -= len(more)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _read_now(self, size: int) -> bytes | None:
        """One read of what is there, with no wait: None if TLS needs more from the network."""
        try:
            return self.socket.recv(size)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            # Without partial writes (OpenSSL's default), a send is all or a "want": a
            # retry after the wait sends the same bytes again, as OpenSSL requires.
            sent = await self._retry(functools.partial(self.socket.send, view))
            view = view[sent:]

    async def send_request(self, data: bytes) -> None:
        """Send all, for a caller who waits for the answer right after (a schedule point).

        When the bytes go out at once, no schedule point of its own (``send_all`` has one):
        a cancellation before is still seen, and nothing is sent then.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = self.socket.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            sent = 0
        if sent < len(data):
            await self.send_all(memoryview(data)[sent:])

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.wait_writable(self.socket)

    @property
    def resumed(self) -> bool:
        """Whether the handshake resumed the session offered (no certificates exchanged)."""
        return bool(self.socket.session_reused)

    def resumable_session(self) -> ssl.SSLSession | None:
        """The session, if the server gave a ticket (or an id) to resume it with."""
        session = self.socket.session
        if session is None or not (session.has_ticket or session.id):
            return None
        return session

    def pending(self) -> bool:
        """Whether something was received already and waits to be read, unseen by the socket.

        OpenSSL decrypts whole records: bytes of a record read only in part stay in the SSL
        object, where polling the socket cannot see them.
        """
        return self._held is not None or self.socket.pending() > 0

    def close(self) -> None:
        """Close the socket now: no TLS close_notify (nobody reads it), no waiting."""
        sock = self.socket
        try:
            if sock.fileno() >= 0:
                # Tasks waiting on the socket (none, normally) must be woken before it closes.
                trio.lowlevel.notify_closing(sock)
        except RuntimeError:
            pass  # not in trio (e.g. at interpreter exit): nobody can be waiting then
        finally:
            sock.close()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()
