"""TLS contexts for connections to the API server, from ``ConnectionInfo``.

Python's ``ssl`` loads client certificates and keys from files only: data given inline is
written to a private temporary file for the moment of loading and removed right after.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from typing import Protocol

logger = logging.getLogger("trioperator")


class TLSSettings(Protocol):
    """What a TLS context is built from: a ``ConnectionInfo`` (which builds its own context
    through this module, hence a protocol rather than an import of it)."""

    @property
    def server(self) -> str: ...
    @property
    def ca_path(self) -> str | None: ...
    @property
    def ca_data(self) -> bytes | None: ...
    @property
    def insecure(self) -> bool | None: ...
    @property
    def certificate_path(self) -> str | None: ...
    @property
    def certificate_data(self) -> bytes | None: ...
    @property
    def private_key_path(self) -> str | None: ...
    @property
    def private_key_data(self) -> bytes | None: ...


def build_ssl_context(info: TLSSettings) -> ssl.SSLContext:
    """The TLS context for a connection: cluster CA, client certificate, verification mode.

    With a cluster CA given, only that CA is trusted (as kubectl does); without one, the
    system's trust store is used.
    """
    cadata: str | bytes | None = None
    if info.ca_data:
        # PEM is text; anything else is taken as DER, which ``cadata`` accepts as bytes.
        cadata = info.ca_data.decode("ascii") if b"-----BEGIN" in info.ca_data else info.ca_data
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH,
        cafile=info.ca_path or None,
        cadata=cadata,
    )
    if info.insecure:
        # Never silently: only an explicit option turns it off, and it is said every time.
        logger.warning(
            f"TLS verification of the API server {info.server} is OFF, as configured"
            " (insecure-skip-tls-verify in the kubeconfig, or ConnectionInfo(insecure=True)):"
            " anyone on the way can read and change the traffic, credentials included."
        )
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

    with contextlib.ExitStack() as stack:
        cert_path = info.certificate_path
        key_path = info.private_key_path
        if info.certificate_data:
            cert_path = stack.enter_context(_temporary_file(info.certificate_data))
        if info.private_key_data:
            key_path = stack.enter_context(_temporary_file(info.private_key_data))
        if cert_path:
            context.load_cert_chain(cert_path, key_path or None)
    return context


def build_proxy_ssl_context(info: TLSSettings) -> ssl.SSLContext:
    """The TLS context for an ``https://`` proxy: the system's trust store and the cluster CA.

    A proxy is not the cluster: it is usually certified as any server is, but may be one of
    the cluster's own (certified by its CA). It never gets the client certificate, which is
    for the API server alone, and is always verified.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if info.ca_path:
        context.load_verify_locations(cafile=info.ca_path)
    if info.ca_data:
        cadata = info.ca_data.decode("ascii") if b"-----BEGIN" in info.ca_data else info.ca_data
        context.load_verify_locations(cadata=cadata)
    return context


@contextlib.contextmanager
def _temporary_file(data: bytes) -> Iterator[str]:
    """A private (0600) file holding ``data``, removed as soon as the block ends."""
    fd, path = tempfile.mkstemp(prefix="trioperator-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
