"""Which local cluster the operator talks to, for the auto-detecting webhook server and tunnel.

Local clusters reach their host machine by special host names (``host.k3d.internal`` etc.).
Which one applies is told, as in Kopf, by the API server's own TLS certificate (its subject,
issuer and SANs need no permissions at all to read), and for K3s also by the ``+k3s`` suffix of
the version the API server reports. The credentials are the usual ones: the pod's service
account inside a cluster, else the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).

Detection is a development convenience: anything that goes wrong while detecting is logged
and counts as "not a known local cluster".
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Collection
from typing import Final
from urllib.parse import urlsplit

import trio

from trioperator._client.api import APIClient
from trioperator._client.config import (
    ConfigError,
    login_with_kubeconfig,
    login_with_service_account,
)
from trioperator._client.credentials import ConnectionInfo, LoginError, Vault
from trioperator._client.settings import NetworkingSettings
from trioperator._kits.errors import MissingDependencyError
from trioperator._util.lognames import framework_logger

__all__ = [
    "DETECTION_TIMEOUT",
    "DOCKER_DESKTOP_HOST",
    "K3D_HOST",
    "MINIKUBE_HOST",
    "ServerIdentity",
    "detect_cluster_host",
    "recognise_cluster",
]

logger = framework_logger("kopf._kits.webhooks", "trioperator.webhooks")

K3D_HOST: Final = "host.k3d.internal"
MINIKUBE_HOST: Final = "host.minikube.internal"
DOCKER_DESKTOP_HOST: Final = "host.docker.internal"

DETECTION_TIMEOUT: Final = 10.0
"""Seconds for the whole detection (the certificate and the version) before giving up."""


@dataclasses.dataclass(frozen=True)
class ServerIdentity:
    """What the API server tells about itself without any permissions."""

    subject_cn: str = ""
    subject_org: str = ""
    issuer_cn: str = ""
    sans: Collection[str] = ()
    git_version: str = ""


def recognise_cluster(identity: ServerIdentity) -> str | None:
    """The host name by which the recognised local cluster reaches its host, or ``None``."""
    if (
        identity.subject_cn == "k3s"
        or identity.subject_org == "k3s"
        or identity.issuer_cn.startswith("k3s-")
        or "+k3s" in identity.git_version
    ):
        return K3D_HOST
    if identity.subject_cn == "minikube" or identity.issuer_cn == "minikubeCA":
        return MINIKUBE_HOST
    if "docker-for-desktop" in identity.sans or "kubernetes.docker.internal" in identity.sans:
        return DOCKER_DESKTOP_HOST
    return None


async def detect_cluster_host(info: ConnectionInfo | None = None) -> str | None:
    """Recognise the cluster of ``info`` (default: the usual credentials); ``None`` if unknown."""
    try:
        with trio.fail_after(DETECTION_TIMEOUT):
            if info is None:
                info = await trio.to_thread.run_sync(_login)
            if info is None:
                logger.warning("No credentials to detect the cluster type with.")
                return None
            identity = await _read_certificate(info)
            host = recognise_cluster(identity)
            if host is None:
                version = await _read_git_version(info)
                host = recognise_cluster(dataclasses.replace(identity, git_version=version))
    except (
        ConfigError,
        LoginError,
        OSError,
        trio.BrokenResourceError,
        trio.TooSlowError,
        ValueError,
    ) as exc:
        logger.warning(f"Cannot detect the cluster type: {exc!r}")
        return None
    return host


def _login() -> ConnectionInfo | None:
    return login_with_service_account() or login_with_kubeconfig()


async def _read_certificate(info: ConnectionInfo) -> ServerIdentity:
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID
    except ImportError:  # pragma: no cover -- a dependency of trustme, the same extra
        raise MissingDependencyError(
            "Detecting the cluster type needs an extra dependency: "
            "`pip install trioperator[webhooks]`."
        ) from None
    url = urlsplit(info.server)
    if url.scheme != "https" or url.hostname is None:
        return ServerIdentity()
    # Only the names in the certificate are read, nothing is trusted: no verification.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    stream = trio.SSLStream(
        await trio.open_tcp_stream(url.hostname, url.port or 443),
        context,
        server_hostname=info.tls_server_name or url.hostname,
    )
    try:
        await stream.do_handshake()
        der = stream.getpeercert(binary_form=True)
    finally:
        await trio.aclose_forcefully(stream)
    if not der:
        return ServerIdentity()
    cert = x509.load_der_x509_certificate(der)

    def first(name: x509.Name, oid: x509.ObjectIdentifier) -> str:
        values = name.get_attributes_for_oid(oid)
        return str(values[0].value) if values else ""

    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        sans = extension.value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        sans = []
    return ServerIdentity(
        subject_cn=first(cert.subject, NameOID.COMMON_NAME),
        subject_org=first(cert.subject, NameOID.ORGANIZATION_NAME),
        issuer_cn=first(cert.issuer, NameOID.COMMON_NAME),
        sans=frozenset(sans),
    )


async def _read_git_version(info: ConnectionInfo) -> str:
    # No retries: this is a hint, and the operator's own start must not wait for it.
    settings = NetworkingSettings(error_backoffs=[])
    async with APIClient(Vault({"detection": info}), settings, logger=logger) as api:
        try:
            version = await api.request("GET", "/version")
        except Exception as exc:
            logger.debug(f"Cannot read the cluster's version: {exc!r}")
            return ""
    return str(version.get("gitVersion", "")) if isinstance(version, dict) else ""
