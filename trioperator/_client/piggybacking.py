"""Credentials from the Kubernetes client libraries the operator may have installed.

trioperator reads plain kubeconfigs and service accounts itself (``_client/config.py``); these
login functions go further by letting a client library do its own configuration (including
its auth plugins: exec providers, cloud auth providers, token files) and then taking just what
an HTTP request needs from the result. They are Kopf's functions with Kopf's names:

* ``login_via_client``: the official ``kubernetes`` library;
* ``login_via_async_client``: ``kubernetes_asyncio`` (its loaders are asyncio coroutines);
* ``login_via_pykube``: ``pykube-ng``.

Each returns ``None`` if its library is not installed and raises ``LoginError`` if the library
finds neither an in-cluster service account nor a kubeconfig. When an operator declares no
``@on.login`` handler, the runtime uses the ones whose libraries are installed (Kopf's order
and rules, see ``fallback_login_functions``).

The libraries are imported inside the functions: they are optional, and importing them is slow.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import sniffio
import trio

from trioperator._client.config import login_with_kubeconfig, login_with_service_account
from trioperator._client.credentials import ConnectionInfo, LoginError

_logger = logging.getLogger(__name__)

# Kopf's priorities (higher is preferred by the vault when several credentials are valid).
PRIORITY_OF_CLIENT = 10
PRIORITY_OF_ASYNC_CLIENT = 15
PRIORITY_OF_PYKUBE = 20

_T = TypeVar("_T")


# ------------------------------------------------------------------------------ kubernetes


def login_via_client(
    *, logger: Any = None, settings: Any = None, **_: Any
) -> ConnectionInfo | None:
    """Credentials as the official ``kubernetes`` library configures itself.

    In-cluster configuration first, the kubeconfig (``$KUBECONFIG``, ``~/.kube/config``) next.
    The library may write CA and client certificates to temporary files: their paths are used.
    """
    log = logger or _logger
    try:
        import kubernetes.client
        import kubernetes.config
    except ImportError:
        return None

    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        log.debug("Client is configured in cluster with service account.")
    except kubernetes.config.ConfigException as in_cluster_exc:
        try:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=_kubeconfig_env()
            )
            log.debug("Client is configured via kubeconfig file.")
        except kubernetes.config.ConfigException as kubeconfig_exc:
            raise _unconfigured(
                "the client library", in_cluster_exc, kubeconfig_exc
            ) from kubeconfig_exc

    config = kubernetes.client.Configuration.get_default_copy()
    # Auth plugins replace the token getter, so ask the getter, not ``api_key``. Newer client
    # versions keep the token under "BearerToken", older ones under "authorization".
    header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix(
        "authorization"
    )
    return _from_client_configuration(
        config, header, settings=settings, priority=PRIORITY_OF_CLIENT
    )


def _unconfigured(library: str, in_cluster: Exception, kubeconfig: Exception) -> LoginError:
    """The error of a client library that found neither of its two configurations."""
    return LoginError(
        f"Cannot authenticate {library} neither in-cluster "
        f"({in_cluster}), nor via kubeconfig ({kubeconfig})."
    )


# ------------------------------------------------------------------------------ kubernetes_asyncio


async def login_via_async_client(
    *, logger: Any = None, settings: Any = None, **_: Any
) -> ConnectionInfo | None:
    """Credentials as ``kubernetes_asyncio`` configures itself (see ``login_via_client``).

    Its loaders are asyncio coroutines. Awaited from asyncio code (e.g. an asyncio-flavoured
    login handler), they run right there; awaited from trio, they run on the operator's
    trio-asyncio loop if there is one, otherwise on a private asyncio loop in a worker thread.
    """
    log = logger or _logger
    try:
        import kubernetes_asyncio.client
        import kubernetes_asyncio.config
    except ImportError:
        return None

    async def load() -> tuple[Any, str | None]:
        try:
            kubernetes_asyncio.config.load_incluster_config()  # type: ignore[no-untyped-call]
            log.debug("Async client is configured in cluster with service account.")
        except kubernetes_asyncio.config.ConfigException as in_cluster_exc:
            try:
                await kubernetes_asyncio.config.load_kube_config(config_file=_kubeconfig_env())
                log.debug("Async client is configured via kubeconfig file.")
            except kubernetes_asyncio.config.ConfigException as kubeconfig_exc:
                raise _unconfigured(
                    "the async client library", in_cluster_exc, kubeconfig_exc
                ) from kubeconfig_exc
        config = kubernetes_asyncio.client.Configuration.get_default_copy()
        header: Any = config.get_api_key_with_prefix("BearerToken")
        if inspect.isawaitable(header):  # a coroutine since kubernetes_asyncio 33.3
            header = await header
        return config, header

    config, header = await _run_asyncio(load)
    return _from_client_configuration(
        config, header, settings=settings, priority=PRIORITY_OF_ASYNC_CLIENT
    )


async def _run_asyncio(fn: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run an asyncio coroutine function to its end from asyncio or from trio."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library == "asyncio":
        return await fn()
    if library != "trio":
        raise RuntimeError("login_via_async_client() must be awaited from trio or asyncio.")

    # Never import trio_asyncio here: importing it changes asyncio's loop policy process-wide.
    # If the operator runs an asyncio loop, the module is imported already.
    trio_asyncio = sys.modules.get("trio_asyncio")
    if trio_asyncio is not None and trio_asyncio.current_loop.get() is not None:
        result: _T = await trio_asyncio.aio_as_trio(fn)()
        return result
    # No asyncio loop in this trio run: a short-lived one in a worker thread does. Waiting for
    # the thread on cancellation is fine: loading a configuration takes moments.
    import asyncio  # only this path needs it: `import trioperator` must not import asyncio

    return await trio.to_thread.run_sync(lambda: asyncio.run(fn()))


def _from_client_configuration(
    config: Any, header: str | None, *, settings: Any, priority: int
) -> ConnectionInfo:
    """Our credentials from a ``Configuration`` of ``kubernetes`` or ``kubernetes_asyncio``."""
    scheme, token = _split_authorization(header)
    if not config.host:
        raise LoginError("The client library is configured without a server address.")
    return ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert or None,  # possibly a temporary file of the library
        insecure=not config.verify_ssl,
        username=config.username or None,  # the libraries use "" for "not set"
        password=config.password or None,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file or None,
        private_key_path=config.key_file or None,
        proxy_url=getattr(config, "proxy", None) or None,
        tls_server_name=getattr(config, "tls_server_name", None) or None,
        trust_env=_trust_env(settings),
        priority=priority,
    )


def _kubeconfig_env() -> str:
    # The libraries read $KUBECONFIG once, when imported; an operator that sets it later
    # (or a test) expects the current value, as kubectl and pykube use.
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def _split_authorization(header: str | None) -> tuple[str | None, str | None]:
    """``"Bearer xyz"`` -> ("Bearer", "xyz"); a lone value is a token (RFC 7235, appendix C)."""
    if not header:
        return None, None
    parts = header.split(" ", 1)
    if len(parts) == 1:
        return None, parts[0]
    return parts[0], parts[1]


# ------------------------------------------------------------------------------ pykube-ng


def login_via_pykube(
    *, logger: Any = None, settings: Any = None, **_: Any
) -> ConnectionInfo | None:
    """Credentials as ``pykube-ng`` configures itself: service account first, kubeconfig next.

    For users with an ``auth-provider``, one request through pykube makes it refresh the token.
    """
    log = logger or _logger
    try:
        import pykube
    except ImportError:
        return None

    try:
        config = pykube.KubeConfig.from_service_account()
        log.debug("Pykube is configured in cluster with service account.")
    except FileNotFoundError as in_cluster_exc:
        try:
            config = pykube.KubeConfig.from_file()
            log.debug("Pykube is configured via kubeconfig file.")
        except (pykube.PyKubeError, FileNotFoundError) as kubeconfig_exc:
            raise _unconfigured("pykube", in_cluster_exc, kubeconfig_exc) from kubeconfig_exc

    provider_token = None
    if config.user.get("auth-provider"):
        pykube.HTTPClient(config).get(version="", base="/")  # only to refresh; status ignored
        provider_token = config.user.get("auth-provider", {}).get("config", {}).get("access-token")

    ca = config.cluster.get("certificate-authority")
    cert = config.user.get("client-certificate")
    key = config.user.get("client-key")
    server = config.cluster.get("server")
    if not server:
        raise LoginError("pykube is configured without a server address.")
    return ConnectionInfo(
        server=server,
        ca_path=ca.filename() if ca else None,  # possibly a temporary file of pykube
        insecure=config.cluster.get("insecure-skip-tls-verify"),
        username=config.user.get("username"),
        password=config.user.get("password"),
        token=config.user.get("token") or provider_token,
        certificate_path=cert.filename() if cert else None,
        private_key_path=key.filename() if key else None,
        default_namespace=config.namespace,
        proxy_url=config.cluster.get("proxy-url"),
        trust_env=_trust_env(settings),
        priority=PRIORITY_OF_PYKUBE,
    )


# ------------------------------------------------------------------------------ fallbacks


def fallback_login_functions() -> list[Callable[..., Any]]:
    """The login functions to use when the operator declares no ``@on.login`` (Kopf's rules).

    Every installed library is used: pykube-ng; then the official ``kubernetes`` library, or
    else ``kubernetes_asyncio``. Only if none of them is installed, trioperator's own readers of
    the service account and the kubeconfig are used (each gives nothing if it finds nothing).
    """
    functions: list[Callable[..., Any]] = []
    if _installed("pykube"):
        functions.append(login_via_pykube)
    if _installed("kubernetes"):
        functions.append(login_via_client)
    elif _installed("kubernetes_asyncio"):
        functions.append(login_via_async_client)
    return functions or [login_with_service_account, login_with_kubeconfig]


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _trust_env(settings: Any) -> bool:
    # Duck-typed: the operator settings live in a higher layer than this module.
    networking = getattr(settings, "networking", None)
    return getattr(networking, "trust_env", False) is True
