"""Webhook servers and tunnels for admission handlers (``settings.admission.server``).

These are configuration objects with Kopf's names and parameters. They are trio-native: the
operator calls ``await server.serve(fn, configs=..., task_status=...)`` in its nursery tree (see
``trioperator._engine.webhooks``); the serving itself (listening, routing, restarts on renewed
certificates) is ``trioperator._runtime.admission.webhook_serving``.

* :class:`WebhookServer` listens on ``addr:port`` (every interface and a free port by default)
  with HTTPS. Without ``certfile``, it generates a CA and a server certificate with ``trustme``
  (``pip install trioperator[webhooks]``) whose SANs cover the host, the address,
  ``extra_sans``, ``localhost`` and ``127.0.0.1``; ``insecure=True`` serves plain HTTP instead
  (for tunnels and curl: the API server calls only HTTPS webhooks).
* :class:`WebhookK3dServer`, :class:`WebhookMinikubeServer`,
  :class:`WebhookDockerDesktopServer` are the same server advertised under the host name by
  which those local clusters reach their host machine; :class:`WebhookAutoServer` picks one of
  those names by detecting the cluster (``trioperator._kits.cluster_detection``).
* :class:`WebhookServiceServer` runs in a pod and is advertised as the in-cluster Service in
  front of it (``clientConfig.service``). Its certificate, for the Service's names, comes from
  one CA for all the replicas behind the Service: mounted files, or by default a CA kept in a
  Secret (``trioperator._kits.webhook_ca``; cryptography, ``trioperator._kits.certificates``).
* :class:`WebhookNgrokTunnel` serves plain HTTP locally and advertises an ngrok tunnel's public
  URL (``pip install trioperator[ngrok]``); :class:`WebhookAutoTunnel` is the auto-server for a
  recognised local cluster and the ngrok tunnel otherwise.

Any other server or tunnel can be a plain async generator in Kopf's shape: a callable that
takes the operator's ``WebhookFn`` and yields ``WebhookClientConfig`` dicts (a ``url`` or a
``service``, and a ``caBundle``) whenever its endpoint changes, calling
``await fn(body, webhook=..., headers=..., sslpeer=...)`` for every review it receives::

    async def my_tunnel(fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        yield {"url": "https://my-tunnel.example.com/hooks"}
        await trio.sleep_forever()

The operator runs such a generator in a task of its own (it must not open nurseries across
its ``yield``). The framework appends ``/<handler id>`` to the URL (or ``service.path``).

A tunnel to a local server can also subclass :class:`WebhookServer` as in Kopf, overriding
``__call__`` to iterate ``super().__call__(fn)`` (the local server's configs, e.g. after a
certificate renewal) and yield the tunnel's; the server then advertises what it yields.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pathlib
import ssl
from collections.abc import AsyncIterator, Collection, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import trio

from trioperator._engine.webhooks import (
    WebhookClientConfig,
    WebhookClientConfigService,
    WebhookFn,
)
from trioperator._kits.cluster_detection import (
    DOCKER_DESKTOP_HOST,
    K3D_HOST,
    MINIKUBE_HOST,
    detect_cluster_host,
)
from trioperator._kits.errors import MissingDependencyError, WebhookCAError
from trioperator._runtime.admission.webhook_serving import (
    ServingSetup,
    StrPath,
    build_url,
    current_support,
    serve_relayed,
    serve_translated,
    serve_webhooks,
)
from trioperator._util.addresses import is_ip_address
from trioperator._util.lognames import framework_logger

if TYPE_CHECKING:
    from trioperator._kits.certificates import CertificateAuthority

__all__ = [
    "WebhookAutoServer",
    "WebhookAutoTunnel",
    "WebhookDockerDesktopServer",
    "WebhookK3dServer",
    "WebhookMinikubeServer",
    "WebhookNgrokTunnel",
    "WebhookServer",
    "WebhookServiceServer",
    "accessible_addr",
    "certificate_hostnames",
    "normalise_hostnames",
]

logger = framework_logger("kopf._kits.webhooks", "trioperator.webhooks")


def accessible_addr(addr: str | None) -> str:
    """The address a client uses to reach a listener on ``addr``.

    Wildcard addresses (``None``, ``0.0.0.0``, ``::``) can be listened on but not connected
    to; they are replaced by the loopback. Everything else is used as it is.
    """
    if addr is None:
        return "localhost"
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if ip.is_unspecified:
        return "127.0.0.1" if ip.version == 4 else "::1"
    return addr


def certificate_hostnames(host: str | None, addr: str | None, extra: Iterable[str]) -> list[str]:
    """The SANs of a generated certificate, the common name first.

    They cover the host, the address, ``extra``, ``localhost`` and ``127.0.0.1`` (for curl and
    port-forwarding), normalised as :func:`normalise_hostnames` does.
    """
    return normalise_hostnames([host, accessible_addr(addr), *extra, "localhost", "127.0.0.1"])


def normalise_hostnames(names: Iterable[str | None]) -> list[str]:
    """Names for a certificate: IPs normalised, wildcards and duplicates dropped, a name first.

    IP addresses are written canonically (the API server compares them strictly); wildcard
    addresses (``0.0.0.0``, ``::``) cannot be connected to and are dropped. The first non-IP
    name moves to the front, as it becomes the certificate's common name.
    """
    seen: dict[str, None] = {}
    for name in names:
        if not name:
            continue
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            seen.setdefault(name, None)
        else:
            if not ip.is_unspecified:
                seen.setdefault(str(ip), None)
    ordered = list(seen)
    leading = [name for name in ordered if not is_ip_address(name)][:1]
    return leading + [name for name in ordered if name not in leading]


class _LocalEndpoint:
    """Where a local server listens (``addr``, ``port``) and the root ``path`` it serves."""

    def __init__(
        self,
        *,
        addr: str | None = None,
        port: int | None = None,
        path: str | None = None,
    ) -> None:
        self.addr = addr
        self.port = port
        self.path = path

    def __repr__(self) -> str:
        return f"{type(self).__name__}(addr={self.addr!r}, port={self.port!r}, path={self.path!r})"


class WebhookServer(_LocalEndpoint):
    """An HTTPS (or HTTP) endpoint on this machine for the API server's admission reviews.

    * ``addr``, ``port``: where to listen (default: every interface, a free port chosen at
      start and kept for the whole run).
    * ``path``: the root path of the webhooks; reviews come to ``<path>/<handler id>``.
    * ``host``: the host name in the advertised URL (default: the class's ``DEFAULT_HOST``,
      else ``addr`` -- or ``localhost`` / the loopback for a wildcard ``addr``).
    * ``cadata``, ``cafile``: the CA bundle advertised as the webhooks' ``caBundle`` (the
      server does not use it). Without them, it is the generated CA, or ``certfile`` itself.
    * ``cadump``: a file to write the advertised CA bundle to (e.g. for ``curl --cacert``).
    * ``certfile``, ``pkeyfile``, ``password``: the server's certificate and key (the key may
      be in ``certfile``). Without them, a CA and a certificate are generated with trustme.
    * ``context``: a pre-configured ``ssl.SSLContext`` to load the above into.
    * ``extra_sans``: more DNS names / IPs for the generated certificate.
    * ``verify_mode``, ``verify_cafile``, ``verify_capath``, ``verify_cadata``: verification of
      client certificates (``ssl.SSLContext.verify_mode``, ``load_verify_locations``); with
      CA locations but no mode, a client certificate is optional but verified when given. The
      verified certificate reaches handlers as ``sslpeer``.
    * ``insecure``: plain HTTP, no TLS (the API server refuses such webhooks; for tunnels,
      curl and debugging).
    * ``file_check_interval``: how often (seconds) ``certfile``, ``pkeyfile``, ``cafile`` and
      ``verify_cafile`` are checked for changes; a change restarts the listener with the new
      files and re-advertises the new CA bundle.
    """

    DEFAULT_HOST: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        addr: str | None = None,
        port: int | None = None,
        path: str | None = None,
        host: str | None = None,
        cadata: bytes | None = None,
        cafile: StrPath | None = None,
        cadump: StrPath | None = None,
        context: ssl.SSLContext | None = None,
        insecure: bool = False,
        certfile: StrPath | None = None,
        pkeyfile: StrPath | None = None,
        password: str | None = None,
        extra_sans: Iterable[str] = (),
        verify_mode: ssl.VerifyMode | None = None,
        verify_cafile: StrPath | None = None,
        verify_capath: StrPath | None = None,
        verify_cadata: str | bytes | None = None,
        file_check_interval: float = 60.0,
    ) -> None:
        if insecure and context is not None:
            raise ValueError("An insecure (plain HTTP) webhook server cannot have an SSL context.")
        if pkeyfile is not None and certfile is None:
            raise ValueError("A webhook server's pkeyfile= needs its certfile= too.")
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"A webhook server's port must be in 0..65535, not {port!r}.")
        if file_check_interval <= 0:
            raise ValueError(
                f"file_check_interval must be positive, not {file_check_interval!r} seconds."
            )
        super().__init__(addr=addr, port=port, path=path)
        self.host = host
        self.cadata = cadata
        self.cafile = cafile
        self.cadump = cadump
        self.context = context
        self.insecure = insecure
        self.certfile = certfile
        self.pkeyfile = pkeyfile
        self.password = password
        self.extra_sans = list(extra_sans)
        self.verify_mode = verify_mode
        self.verify_cafile = verify_cafile
        self.verify_capath = verify_capath
        self.verify_cadata = verify_cadata
        self.file_check_interval = file_check_interval
        # The host name used when `host` is not given: the class's, or a detected one.
        self._default_host: str | None = self.DEFAULT_HOST
        # The local server's configs while a Kopf-style subclass's __call__ relays them.
        self._local_configs: AsyncIterator[WebhookClientConfig] | None = None

    @property
    def public_host(self) -> str:
        """The host name in the advertised URL."""
        return self.host or self._default_host or accessible_addr(self.addr)

    @property
    def root_path(self) -> str:
        """The webhooks' root path in the URL: ``""`` or ``/a/b`` (no trailing slash)."""
        stripped = (self.path or "").strip("/")
        return f"/{stripped}" if stripped else ""

    @property
    def watched_files(self) -> list[StrPath]:
        """The files whose changes restart the server (only those given by the user).

        Beyond Kopf's three, the CA of client certificates: it is rotated the same way.
        """
        files = (self.certfile, self.pkeyfile, self.cafile, self.verify_cafile)
        return [path for path in files if path is not None]

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve reviews with ``fn`` until cancelled (the trio-native server shape).

        A subclass that overrides ``__call__`` in Kopf's way (a tunnel that iterates
        ``super().__call__(fn)`` and yields adjusted client configs) is served with the
        configs its ``__call__`` yields.
        """
        if type(self).__call__ is not WebhookServer.__call__:
            await serve_relayed(
                fn,
                server=_Local(self),
                relay=partial(self._relay, fn),
                configs=configs,
                task_status=task_status,
            )
        else:
            await self._serve_locally(fn, configs=configs, task_status=task_status)

    async def _serve_locally(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await serve_webhooks(
            fn,
            build=self.build_setup,
            addr=self.addr,
            port=self.port,
            path=self.root_path,
            host=self.public_host,
            configs=configs,
            watched=self.watched_files,
            check_interval=self.file_check_interval,
            service=self.service,
            task_status=task_status,
        )

    @property
    def service(self) -> WebhookClientConfigService | None:
        """The in-cluster Service to advertise instead of a URL (none for a plain server)."""
        return None

    @property
    def certificate_names(self) -> list[str]:
        """The SANs of a generated certificate, the common name first."""
        return certificate_hostnames(self.host or self._default_host, self.addr, self.extra_sans)

    def _relay(
        self, fn: WebhookFn, local: AsyncIterator[WebhookClientConfig]
    ) -> AsyncIterator[WebhookClientConfig]:
        self._local_configs = local
        return self(fn)

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        """The client configs of the local server, for Kopf-style subclasses' ``__call__``.

        Only a subclass's ``super().__call__(fn)`` works, while the operator serves it: the
        listening runs in the operator's task tree (``serve()``), never inside a generator.
        """
        if self._local_configs is None:
            raise TypeError(
                f"{type(self).__name__} is not iterable on its own: the operator serves it "
                f"with serve(). To adjust its client configs (e.g. for a tunnel), subclass it "
                f"and override __call__ to iterate super().__call__(fn), as in Kopf."
            )
        async for config in self._local_configs:
            yield config

    def url(self, port: int) -> str:
        """The advertised URL of this server if it listens on ``port``."""
        scheme = "http" if self.insecure else "https"
        return build_url(scheme, self.public_host, port, self.root_path)

    def build_setup(self) -> ServingSetup:
        """Load (or generate) the certificates into a TLS context; blocking file I/O.

        Called at start and after the watched files change.
        """
        cadata = self.cadata
        if cadata is None and self.cafile is not None:
            cadata = pathlib.Path(self.cafile).read_bytes()
        context = self.context
        if context is None and not self.insecure:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if context is not None:
            self._load_client_verification(context)
            if self.certfile is not None:
                logger.debug("Loading the webhook server's certificate from %s", self.certfile)
                context.load_cert_chain(self.certfile, self.pkeyfile, self.password)
                if cadata is None:
                    cadata = pathlib.Path(self.certfile).read_bytes()
            else:
                # The generated CA is the only one that can vouch for the generated
                # certificate, so it is advertised whatever cafile/cadata say.
                cadata = self._generate_certificate(context)
        if self.cadump is not None and cadata is not None:
            pathlib.Path(self.cadump).write_bytes(cadata)
        return ServingSetup(context=context, cadata=cadata)

    def _load_client_verification(self, context: ssl.SSLContext) -> None:
        if self.verify_mode is not None:
            context.verify_mode = self.verify_mode
        if self.verify_cafile or self.verify_capath or self.verify_cadata:
            cadata = self.verify_cadata
            # ssl takes bytes as DER only; PEM given as bytes is a common slip, accept it.
            if isinstance(cadata, bytes) and cadata.lstrip().startswith(b"-----BEGIN"):
                cadata = cadata.decode("ascii")
            context.load_verify_locations(self.verify_cafile, self.verify_capath, cadata)
            if context.verify_mode == ssl.CERT_NONE:
                context.verify_mode = ssl.CERT_OPTIONAL

    def _generate_certificate(self, context: ssl.SSLContext) -> bytes:
        trustme = _import_trustme()
        hostnames = self.certificate_names
        logger.debug("Generating a self-signed certificate for %s", ", ".join(hostnames))
        ca = trustme.CA(organization_name="trioperator webhooks")
        cert = ca.issue_cert(*hostnames, common_name=_common_name(hostnames))
        cert.configure_cert(context)
        cadata: bytes = ca.cert_pem.bytes()
        return cadata

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        """A certificate for ``hostnames`` and its private key, both PEM (Kopf's helper).

        The certificate comes with the CA that issued it (the PEM holds both), so the same
        file serves as ``certfile`` and as ``cafile``/``cadata``. The names are normalised as
        :func:`normalise_hostnames` does; ``password`` encrypts the key.
        """
        trustme = _import_trustme()
        names = normalise_hostnames(hostnames)
        if not names:
            raise ValueError(f"No usable host names for a certificate in {hostnames!r}.")
        ca = trustme.CA(organization_name="trioperator webhooks")
        cert = ca.issue_cert(*names, common_name=_common_name(names))
        chain = b"".join(pem.bytes() for pem in cert.cert_chain_pems) + ca.cert_pem.bytes()
        key: bytes = cert.private_key_pem.bytes()
        if password is not None:
            with _needing_cryptography():
                from trioperator._kits.certificates import encrypt_private_key
            key = encrypt_private_key(key, password)
        return chain, key


class _Local:
    """A server's own listening, without its subclass's ``__call__`` in between."""

    def __init__(self, server: WebhookServer) -> None:
        self._server = server

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._server._serve_locally(fn, configs=configs, task_status=task_status)


def _import_trustme() -> Any:
    try:
        import trustme
    except ImportError:
        raise MissingDependencyError(
            "A webhook server without certfile= generates a self-signed certificate, which "
            "needs an extra dependency: `pip install trioperator[webhooks]` (or "
            "trioperator[dev]). Or pass certfile=/pkeyfile= of your own certificate, or "
            "insecure=True for plain HTTP."
        ) from None
    return trustme


@contextlib.contextmanager
def _needing_cryptography() -> Iterator[None]:
    """Import what needs cryptography (the ``webhooks`` extra), saying so when it is missing."""
    try:
        yield
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "cryptography":
            raise
        raise MissingDependencyError(
            "A webhook server with a CA kept in a Secret (or an encrypted key) needs an extra "
            "dependency: `pip install trioperator[webhooks]` (or trioperator[dev])."
        ) from None


def _common_name(names: list[str]) -> str | None:
    return names[0] if names and not is_ip_address(names[0]) else None


class WebhookK3dServer(WebhookServer):
    """A :class:`WebhookServer` that K3d/K3s clusters reach as ``host.k3d.internal``."""

    DEFAULT_HOST: ClassVar[str | None] = K3D_HOST


class WebhookMinikubeServer(WebhookServer):
    """A :class:`WebhookServer` that Minikube clusters reach as ``host.minikube.internal``."""

    DEFAULT_HOST: ClassVar[str | None] = MINIKUBE_HOST


class WebhookDockerDesktopServer(WebhookServer):
    """A :class:`WebhookServer` that Docker Desktop reaches as ``host.docker.internal``."""

    DEFAULT_HOST: ClassVar[str | None] = DOCKER_DESKTOP_HOST


class WebhookServiceServer(WebhookServer):
    """A :class:`WebhookServer` in a pod, advertised as the in-cluster Service in front of it.

    Beyond Kopf. The webhook configurations get ``clientConfig.service`` (``name``,
    ``namespace``, ``port``, ``path``) instead of a URL, so the API server reaches the operator
    through the Service ``name`` (which must route its ``service_port`` to this server's
    ``port``, 9443 by default). ``namespace`` defaults to the pod's own (``POD_NAMESPACE``, else
    its service account's). The certificate names the Service in all the forms the API server
    and in-cluster clients use: ``name``, ``name.namespace``, ``name.namespace.svc`` (the
    common name: that is what the API server verifies) and ``name.namespace.svc.cluster.local``;
    ``extra_sans`` adds more (e.g. another cluster domain).

    Every replica behind the Service must be trusted by the one ``caBundle`` of the shared
    webhook configurations, so the certificates come from one CA for all of them:

    * ``certfile``/``pkeyfile``/``cafile`` given (e.g. a Secret mounted from cert-manager:
      ``tls.crt``, ``tls.key``, ``ca.crt``): they are served and advertised as they are, and
      renewals are picked up as by every server.
    * otherwise, with ``shared_ca`` (the default): the CA kept in the Secret ``ca_secret``
      (default ``<name>-ca``) in ``ca_secret_namespace`` (default: the Service's namespace). The
      first replica creates it with a new CA, the others read it (see ``_kits.webhook_ca``);
      each issues its own certificate from it at start. This needs the operator's API client
      (the server must run as ``settings.admission.server``) and RBAC: ``get`` on that Secret,
      ``create`` on secrets in its namespace (``trioperator rbac --webhook-ca-secret NAME``).
    * ``shared_ca=False``: a CA of its own, generated at start (trustme), as
      :class:`WebhookServer` does: for one replica only (a second one would advertise
      another CA).
    """

    def __init__(
        self,
        *,
        name: str,
        namespace: str | None = None,
        service_port: int = 443,
        port: int | None = 9443,
        shared_ca: bool = True,
        ca_secret: str | None = None,
        ca_secret_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(port=port, **kwargs)
        if not name:
            raise ValueError("A webhook service server needs the Service's name=.")
        if not 1 <= service_port <= 65535:
            raise ValueError(f"service_port must be in 1..65535, not {service_port!r}.")
        if (ca_secret or ca_secret_namespace) and (self.certfile is not None or not shared_ca):
            raise ValueError(
                "ca_secret= is where the shared CA is kept: it cannot go with certfile= (the "
                "files are the certificate) nor with shared_ca=False (a CA of its own)."
            )
        if namespace is None:
            namespace = _pod_namespace()
        if not namespace:
            raise ValueError(
                f"The namespace of the webhook Service {name!r} is unknown: pass namespace= "
                f"(outside of a pod, there is no service account to take it from)."
            )
        self.name = name
        self.namespace = namespace
        self.service_port = service_port
        self.shared_ca = shared_ca
        self.ca_secret = ca_secret or f"{name}-ca"
        self.ca_secret_namespace = ca_secret_namespace or namespace
        # The shared CA once read from (or created in) its Secret when the server starts.
        self._ca: CertificateAuthority | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, namespace={self.namespace!r}, "
            f"port={self.port!r}, path={self.path!r})"
        )

    @property
    def service(self) -> WebhookClientConfigService | None:
        service = WebhookClientConfigService(
            namespace=self.namespace, name=self.name, port=self.service_port
        )
        if self.root_path:
            service["path"] = self.root_path
        return service

    @property
    def certificate_names(self) -> list[str]:
        dns = f"{self.name}.{self.namespace}.svc"
        forms = [dns, self.name, f"{self.name}.{self.namespace}", f"{dns}.cluster.local"]
        return normalise_hostnames([*forms, *super().certificate_names])

    @property
    def uses_shared_ca(self) -> bool:
        """Whether the certificate is issued from the CA in the Secret ``ca_secret``."""
        return self.shared_ca and self.certfile is None and not self.insecure

    async def _serve_locally(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        if self.uses_shared_ca:
            self._ca = await self._obtain_shared_ca()
        await super()._serve_locally(fn, configs=configs, task_status=task_status)

    async def _obtain_shared_ca(self) -> CertificateAuthority:
        api = current_support().api
        where = f"{self.ca_secret_namespace}/{self.ca_secret}"
        if api is None:
            raise WebhookCAError(
                f"{self!r} keeps its CA in the Secret {where}, which needs the operator's API "
                f"client: serve it as settings.admission.server (or pass certfile=, or "
                f"shared_ca=False for a CA of its own)."
            )
        with _needing_cryptography():
            from trioperator._kits.webhook_ca import obtain_shared_ca
        return await obtain_shared_ca(api, name=self.ca_secret, namespace=self.ca_secret_namespace)

    def _generate_certificate(self, context: ssl.SSLContext) -> bytes:
        if not self.uses_shared_ca:
            return super()._generate_certificate(context)
        if self._ca is None:
            raise RuntimeError(
                f"{self!r} issues its certificate from the CA in the Secret {self.ca_secret!r}, "
                f"which is read when the server starts serving (serve())."
            )
        from trioperator._kits.certificates import load_server_certificate

        hostnames = self.certificate_names
        logger.debug("Issuing a certificate from the shared CA for %s", ", ".join(hostnames))
        chain, key = self._ca.issue(hostnames, common_name=_common_name(hostnames))
        load_server_certificate(context, chain, key)
        return self._ca.bundle


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _pod_namespace() -> str | None:
    """The pod's namespace: ``POD_NAMESPACE`` (as the manifests set it), else the service
    account's (mounted into every pod that has one)."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


class _ClusterDetecting:
    """The servers that adapt to the local cluster they find when they start."""

    @staticmethod
    async def guess_host() -> str | None:
        """The host name of the detected local cluster, or ``None`` (Kopf's helper)."""
        return await detect_cluster_host()

    async def _detect_host(self, *, otherwise: str) -> str | None:
        """:meth:`guess_host`, logged; ``otherwise`` says what is done when nothing is found."""
        host = await self.guess_host()
        if host is None:
            logger.info(f"No known local cluster detected: {otherwise}.")
        else:
            logger.info(f"A local cluster detected: it reaches the webhooks at {host}.")
        return host


class WebhookAutoServer(_ClusterDetecting, WebhookServer):
    """A :class:`WebhookServer` advertised under the host name of the detected local cluster.

    K3d/K3s, Minikube and Docker Desktop are recognised (see
    ``trioperator._kits.cluster_detection``) when the server starts; for any other cluster it
    is a plain local server. It never tunnels: see :class:`WebhookAutoTunnel` for that.
    """

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        detected = await self._detect_host(otherwise="serving webhooks as a local server")
        if detected is not None:
            self._default_host = detected
        await super().serve(fn, configs=configs, task_status=task_status)


class WebhookNgrokTunnel(_LocalEndpoint):
    """Admission reviews through an ngrok_ tunnel to a local plain-HTTP :class:`WebhookServer`.

    .. _ngrok: https://ngrok.com/

    ``addr``, ``port``, ``path`` are those of the local server. ``token`` (for paid plans),
    ``region`` and ``binary`` (the ``ngrok`` executable; else pyngrok downloads one) configure
    pyngrok (``pip install trioperator[ngrok]``). The advertised URL is the tunnel's public
    HTTPS URL with the same path and no CA bundle (ngrok's certificates are publicly trusted).

    The public URL is reachable by anybody who learns it; use it for development only.
    """

    def __init__(
        self,
        *,
        addr: str | None = None,
        port: int | None = None,
        path: str | None = None,
        token: str | None = None,
        region: str | None = None,
        binary: StrPath | None = None,
    ) -> None:
        super().__init__(addr=addr, port=port, path=path)
        self.token = token
        self.region = region
        self.binary = binary

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve locally and through the tunnel until cancelled; the tunnel is closed then."""
        try:
            from pyngrok import conf, ngrok
        except ImportError:
            raise MissingDependencyError(
                "The ngrok webhook tunnel needs an extra dependency: "
                "`pip install trioperator[ngrok]` (or trioperator[dev])."
            ) from None
        options: dict[str, Any] = {}
        if self.binary is not None:
            options["ngrok_path"] = os.fspath(self.binary)
        if self.region is not None:
            options["region"] = self.region
        if self.token is not None:
            options["auth_token"] = self.token
        pyngrok_config = conf.PyngrokConfig(**options)
        local = WebhookServer(addr=self.addr, port=self.port, path=self.path, insecure=True)
        public_urls: list[str] = []

        async def disconnect() -> None:
            while public_urls:
                url = public_urls.pop()
                await trio.to_thread.run_sync(
                    partial(ngrok.disconnect, url, pyngrok_config=pyngrok_config)
                )

        async def retunnel(config: WebhookClientConfig) -> WebhookClientConfig:
            # A new local endpoint (a restart) gets a new tunnel; the old one goes first.
            await disconnect()
            # Where ngrok forwards to: the address the local server listens on (a bare port
            # would be "localhost", which may resolve to ::1 while we listen on 127.0.0.1).
            port = urlsplit(config["url"]).port
            host = accessible_addr(self.addr)
            target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            tunnel = await trio.to_thread.run_sync(
                partial(ngrok.connect, target, "http", pyngrok_config=pyngrok_config)
            )
            public_url = str(tunnel.public_url)
            public_urls.append(public_url)
            if public_url.startswith("http://"):  # an ngrok v2 agent may hand out both
                public_url = "https://" + public_url.removeprefix("http://")
            url = f"{public_url.rstrip('/')}{local.root_path}"
            logger.info(f"Admission webhooks are tunnelled through ngrok at {url}")
            return WebhookClientConfig(url=url)

        try:
            await serve_translated(
                fn, server=local, translate=retunnel, configs=configs, task_status=task_status
            )
        finally:
            with trio.move_on_after(_TUNNEL_CLOSING_TIMEOUT, shield=True):
                await disconnect()


_TUNNEL_CLOSING_TIMEOUT = 5.0
"""Seconds to close an ngrok tunnel when the operator stops (it is a call to the local agent)."""


class WebhookAutoTunnel(_ClusterDetecting, _LocalEndpoint):
    """A :class:`WebhookServer` for a detected local cluster, else a :class:`WebhookNgrokTunnel`.

    Detection is that of :class:`WebhookAutoServer`. Only ``addr``, ``port`` and ``path`` are
    configurable, as they are common to both. Mind that a cluster that is not recognised (or a
    failed detection) means a public ngrok URL.
    """

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        server: WebhookServer | WebhookNgrokTunnel
        host = await self._detect_host(otherwise="tunnelling webhooks through ngrok")
        if host is None:
            server = WebhookNgrokTunnel(addr=self.addr, port=self.port, path=self.path)
        else:
            server = WebhookServer(addr=self.addr, port=self.port, path=self.path, host=host)
        await server.serve(fn, configs=configs, task_status=task_status)
