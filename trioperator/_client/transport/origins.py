"""Where the connections go: the origin (the API server) and the proxy on the way, if any."""

from __future__ import annotations

import base64
import math
import ssl
from typing import Final
from urllib.parse import unquote, urlsplit

__all__ = ["TLS_SESSION_REFRESH", "Origin", "Proxy"]

TLS_SESSION_REFRESH: Final = 600.0
"""Seconds after which the kept TLS session is replaced by a new connection's: well within the
lifetime of a ticket (the API server's Go TLS takes tickets for up to 7 days, and rotates its
ticket keys daily)."""


class Proxy:
    """An HTTP(S) proxy on the way to the origin.

    ``https`` origins are reached through a tunnel (``CONNECT``), with TLS to the origin inside
    it; ``http`` origins get their requests in absolute form, as HTTP proxies expect. The
    credentials of the proxy URL are sent as ``Proxy-Authorization`` (Basic) and never shown:
    ``url`` holds the proxy's address only.
    """

    __slots__ = ("authorization", "host", "port", "ssl_context", "tls", "url")

    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(
                f"unsupported proxy URL scheme {scheme!r}: only http:// and https:// proxies"
            )
        self.tls = scheme == "https"
        host = parts.hostname
        if not host:
            raise ValueError("the proxy URL has no host")
        self.host = host
        self.port = parts.port or (443 if self.tls else 80)  # a bad port raises ValueError
        self.ssl_context = ssl_context if ssl_context is not None else default_context(self.tls)
        bracketed = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{bracketed}:{self.port}"
        self.authorization: str | None = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode("ascii")


def default_context(tls: bool) -> ssl.SSLContext | None:
    # A TLS proxy is verified against the system's trust store, as any HTTPS server is.
    return ssl.create_default_context() if tls else None


class Origin:
    """Where the connections go: scheme, host, port, TLS settings and a path prefix.

    ``server_name`` is the TLS name to send (SNI) and to verify; by default the host.
    ``proxy``, if any, is where the connections go instead, to reach the origin through it.
    """

    __slots__ = (
        "authority",
        "host",
        "host_header",
        "port",
        "prefix",
        "proxy",
        "server_name",
        "ssl_context",
        "target_base",
        "tls",
        "tls_session",
        "tls_session_since",
    )

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int | None,
        *,
        prefix: str = "",
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {scheme!r}: only http and https")
        if not host:
            raise ValueError("the server URL has no host")
        self.tls = scheme == "https"
        if self.tls and ssl_context is None:
            raise ValueError("an https origin needs a TLS context")
        self.ssl_context = ssl_context
        self.host = host
        default_port = 443 if self.tls else 80
        self.port = default_port if port is None else port
        bracketed = f"[{host}]" if ":" in host else host
        self.host_header = bracketed if self.port == default_port else f"{bracketed}:{self.port}"
        self.authority = f"{bracketed}:{self.port}"  # for CONNECT: always with the port
        self.server_name = server_name or host
        self.prefix = prefix.rstrip("/")
        self.proxy = proxy
        # What goes before the path in the request line: an HTTP proxy needs the whole URL.
        forwarded = proxy is not None and not self.tls
        self.target_base = f"http://{self.host_header}{self.prefix}" if forwarded else self.prefix
        # The server's latest TLS session ticket, offered by every new direct connection (both
        # pools share the origin): a resumed handshake skips the certificates and their
        # signatures. It is the server that saves most (its CPU per new connection drops to
        # about a third; figures: benchmarks/README.md). A pool grows by dozens of
        # connections in a burst, and each watch reconnects now and then. A ticket the server
        # no longer takes only costs the full handshake it would have been anyway.
        self.tls_session: ssl.SSLSession | None = None
        # When it was kept (trio's clock). Reading a session out of a connection is not free:
        # the ssl module copies it through its serialized form, certificates included, which
        # costs about as much as a handshake. So it is read only when there is none, when the
        # last one was refused, or when it is getting old (see ticket_wanted).
        self.tls_session_since = -math.inf

    def ticket_wanted(self, resumed: bool, now: float) -> bool:
        """Whether a new connection's session is to be kept for the next ones.

        ``resumed``: whether its handshake resumed the session offered. A refused offer means
        the server no longer takes it (a restart, rotated keys): the new session replaces it.
        """
        return (
            self.tls_session is None
            or not resumed
            or now - self.tls_session_since > TLS_SESSION_REFRESH
        )

    def keep_session(self, session: ssl.SSLSession, now: float) -> None:
        self.tls_session = session
        self.tls_session_since = now
