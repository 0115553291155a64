"""A real Kubernetes control plane for tests: etcd and kube-apiserver as child processes.

Where the fake API (:class:`~trioperator.testing.FakeAPI`) is not enough (the real server's
validation, defaulting, admission, watch semantics), :class:`RealControlPlane` starts a private
etcd and kube-apiserver on free loopback ports, with their state in a temporary directory,
installs the given CRDs, writes a kubeconfig, and stops everything on exit::

    with RealControlPlane(crds=["crd.yaml"]) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        ...

The binaries are found as controller-runtime's envtest finds them, in the directory named by
``KUBEBUILDER_ASSETS`` (``etcd``, ``kube-apiserver``, ``kubectl``; what ``setup-envtest use -p
path`` prints), else in the cache of trioperator's own builder (``scripts/kube-up``:
``${TRIOPERATOR_KUBE_CACHE:-~/.cache/trioperator/kube}/bin``, with etcd from ``$PATH``).

The pytest plugin (``trioperator.testing.pytest_plugin``) serves one for the test session, and
:func:`~trioperator.testing.run_operator` runs an operator against it (``server=``).

This module uses only the standard library (and PyYAML, when reading CRD files), and it runs as
a script too: ``scripts/kube-up`` takes the state files and the command lines of both servers
from it (see :func:`main`), so the development server and the test kit's start the same way.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import urllib.request

# urllib.request, urllib.error and http.client (with email) are imported where requests are
# made: importing the test kit (e.g. for FakeAPIThread next to an operator, as
# tests/integration/test_lazy_imports.py does) must not load them.

__all__ = [
    "ControlPlaneBinaries",
    "ControlPlaneError",
    "ControlPlaneRequestError",
    "RealControlPlane",
    "load_crds",
    "real_control_plane",
]

ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"
START_TIMEOUT = 60.0
"""Seconds for etcd and kube-apiserver to become ready, and for the CRDs to be established."""
STOP_TIMEOUT = 20.0
"""Seconds each process has to exit after SIGTERM before it is killed."""
REQUEST_TIMEOUT = 10.0
"""Seconds for one request of the control plane's own (readiness, CRDs, namespaces)."""
POLL_INTERVAL = 0.1

Obj = dict[str, Any]
CRDSource = Mapping[str, Any] | str | os.PathLike[str]


class ControlPlaneError(Exception):
    """The control plane cannot be found, started or used; the message says why."""


class ControlPlaneRequestError(ControlPlaneError):
    """The API server answered a request of the control plane with an error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------ binaries


def builder_cache() -> Path:
    """Where ``scripts/kube-up`` keeps the binaries it builds (its ``bin/`` subdirectory)."""
    configured = os.environ.get("TRIOPERATOR_KUBE_CACHE")
    if configured:
        return Path(configured)
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "trioperator" / "kube"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@dataclass(frozen=True)
class ControlPlaneBinaries:
    """The programs of a control plane."""

    etcd: Path
    kube_apiserver: Path
    kubectl: Path | None = None

    @classmethod
    def find(cls, assets: str | os.PathLike[str] | None = None) -> ControlPlaneBinaries:
        """The binaries in ``assets``, else in ``$KUBEBUILDER_ASSETS``, else in the cache of
        ``scripts/kube-up``. etcd and kubectl missing from that directory are looked up in
        ``$PATH`` (Debian's etcd, which kube-up uses, lives there)."""
        if assets is None:
            assets = os.environ.get(ASSETS_VARIABLE) or None
            origin = f"${ASSETS_VARIABLE}"
        else:
            origin = "assets="
        if assets is not None:
            where = Path(assets).expanduser()
        else:
            where = builder_cache() / "bin"
            origin = "the cache of trioperator's scripts/kube-up"
        apiserver = where / "kube-apiserver"
        if not _executable(apiserver):
            raise ControlPlaneError(
                f"No executable kube-apiserver in {where} ({origin}). Set {ASSETS_VARIABLE} to a "
                f"directory with etcd, kube-apiserver and kubectl (e.g. what `setup-envtest use "
                f"-p path` prints), or build them once with trioperator's scripts/kube-up."
            )
        etcd = where / "etcd"
        if not _executable(etcd):
            found = shutil.which("etcd")
            if found is None:
                raise ControlPlaneError(f"No etcd in {where} ({origin}) nor in $PATH.")
            etcd = Path(found)
        kubectl: Path | None = where / "kubectl"
        if not _executable(where / "kubectl"):
            found = shutil.which("kubectl")
            kubectl = Path(found) if found is not None else None
        return cls(etcd=etcd, kube_apiserver=apiserver, kubectl=kubectl)


def apiserver_version(binary: str | os.PathLike[str]) -> tuple[int, int]:
    """(major, minor) of a kube-apiserver binary, from ``--version`` ("Kubernetes v1.20.2")."""
    try:
        result = subprocess.run(
            [os.fspath(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=REQUEST_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ControlPlaneError(f"Cannot run {binary} --version: {exc}") from exc
    match = re.search(r"v(\d+)\.(\d+)", result.stdout)
    if match is None:
        raise ControlPlaneError(f"{binary} --version said {result.stdout.strip()!r}")
    return int(match.group(1)), int(match.group(2))


# ------------------------------------------------------------------------------ shared start logic
# What scripts/kube-up runs too (through `main`): keep the two in step by changing it here.


def prepare_state(state: str | os.PathLike[str], port: int) -> str:
    """Create the API server's serving certificate, service-account keys and admin token in
    ``state`` (once; later calls reuse them), write ``state/kubeconfig`` for ``port``, and
    return the admin token. The certificate is for 127.0.0.1 and localhost; the token belongs
    to ``system:masters``, so it stays all-powerful even where RBAC is enforced."""
    directory = Path(state)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    tls_crt = directory / "tls.crt"
    tokens = directory / "tokens.csv"
    if not tls_crt.exists() or tls_crt.stat().st_size == 0 or not tokens.exists():
        openssl = shutil.which("openssl")
        if openssl is None:
            raise ControlPlaneError("openssl is needed to create the API server's certificate.")
        print(
            f"creating a serving certificate, service-account keys and a token in {directory}",
            file=sys.stderr,
        )
        commands = [
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
             "-subj", "/CN=trioperator-kube-apiserver",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
             "-keyout", str(directory / "tls.key"), "-out", str(tls_crt)],
            [openssl, "genrsa", "-out", str(directory / "sa.key"), "2048"],
            [openssl, "rsa", "-in", str(directory / "sa.key"), "-pubout",
             "-out", str(directory / "sa.pub")],
        ]  # fmt: skip
        for command in commands:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise ControlPlaneError(f"{' '.join(command)} failed: {result.stderr.strip()}")
        # token,user,uid,"groups"
        tokens.write_text(f"{secrets.token_hex(32)},admin,admin,system:masters\n")
        for name in ("tls.key", "sa.key", "tokens.csv"):
            (directory / name).chmod(0o600)
    token = tokens.read_text().split(",", 1)[0].strip()
    # Replaced whole, never seen half-written by a test session reading it meanwhile.
    partial = directory / f"kubeconfig.{os.getpid()}.partial"
    partial.write_text(_kubeconfig(port, base64.b64encode(tls_crt.read_bytes()).decode(), token))
    partial.chmod(0o600)
    os.replace(partial, directory / "kubeconfig")
    return token


def _kubeconfig(port: int, ca_data: str, token: str) -> str:
    return f"""apiVersion: v1
kind: Config
current-context: trioperator-local
clusters:
- name: trioperator-local
  cluster:
    server: https://127.0.0.1:{port}
    certificate-authority-data: {ca_data}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: trioperator-local
  context: {{cluster: trioperator-local, user: admin, namespace: default}}
"""


def etcd_command(
    etcd: str | os.PathLike[str], state: str | os.PathLike[str], client_port: int, peer_port: int
) -> list[str]:
    """etcd on loopback, its data in ``state/etcd``. Progress notifications every 5 s let the
    API server's watch cache advance on quiet resources (BOOKMARKs for every watch)."""
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        os.fspath(etcd),
        "--name=trioperator",
        f"--data-dir={Path(state) / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=trioperator={peer}",
        "--logger=zap",
        "--log-outputs=stderr",
        "--experimental-watch-progress-notify-interval=5s",
    ]


def apiserver_command(
    apiserver: str | os.PathLike[str],
    state: str | os.PathLike[str],
    port: int,
    etcd_port: int,
    *,
    authorization_mode: str = "AlwaysAllow",
    extra_args: Sequence[str] = (),
    version: tuple[int, int] | None = None,
) -> list[str]:
    """kube-apiserver on 127.0.0.1:``port`` with the files of :func:`prepare_state`.

    ``--endpoint-reconciler-type=none``: Endpoints cannot hold a loopback address, so the
    default reconciler would only log errors for the ``kubernetes`` service. 1.20 needs the
    ``EfficientWatchResumption`` gate for BOOKMARKs on quiet resources (on by default from
    1.21, and the gate is gone in later versions, which refuse unknown gates).
    """
    directory = Path(state)
    version = version if version is not None else apiserver_version(apiserver)
    command = [
        os.fspath(apiserver),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={directory / 'tls.crt'}",
        f"--tls-private-key-file={directory / 'tls.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={directory / 'sa.pub'}",
        f"--service-account-signing-key-file={directory / 'sa.key'}",
        f"--token-auth-file={directory / 'tokens.csv'}",
        f"--authorization-mode={authorization_mode}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--endpoint-reconciler-type=none",
    ]
    if version < (1, 21):
        command.append("--feature-gates=EfficientWatchResumption=true")
    return [*command, *extra_args]


# ------------------------------------------------------------------------------ the control plane


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (the kernel's choice)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def load_crds(source: CRDSource) -> list[Obj]:
    """The CustomResourceDefinitions of a body, or of a YAML file with one or more of them."""
    if isinstance(source, Mapping):
        return [copy.deepcopy(dict(source))]
    import yaml  # only here: the rest of the module runs on the standard library alone

    path = Path(source)
    crds: list[Obj] = []
    for document in yaml.safe_load_all(path.read_text()):
        if document is None:
            continue
        if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
            raise ValueError(f"{path}: only CustomResourceDefinitions are expected in crds=.")
        crds.append(document)
    return crds


class _Process:
    """One server as a child process, its output in a log file."""

    def __init__(self, name: str, command: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 -- closed in stop()
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self._log.close()
            raise ControlPlaneError(f"Cannot start {name}: {exc}") from exc

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {code} during startup; the end of its log "
                f"({self.log_path}):\n{self.tail()}"
            )

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
        finally:
            self._log.close()


class RealControlPlane:
    """etcd and kube-apiserver, started on entering, stopped on leaving (``with``).

    Ports are chosen free on 127.0.0.1; the state (etcd's data, certificates, logs, the
    kubeconfig) lives in ``state_dir``, a new temporary directory by default, removed at the
    end. Startup is bounded by ``start_timeout`` (a server that exits or is not ready in time
    raises :class:`ControlPlaneError` with the end of its log); stopping sends SIGTERM and
    kills after ``stop_timeout``. Authentication is a bearer token of ``system:masters``.
    """

    def __init__(
        self,
        *,
        crds: Iterable[CRDSource] = (),
        binaries: ControlPlaneBinaries | None = None,
        assets: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = START_TIMEOUT,
        stop_timeout: float = STOP_TIMEOUT,
        authorization_mode: str = "AlwaysAllow",
        apiserver_args: Sequence[str] = (),
    ) -> None:
        """
        :param crds: CustomResourceDefinitions to install once the server is ready: bodies,
            or paths of YAML files with one or more CRDs (see also :meth:`install_crds`).
        :param binaries: the programs; by default :meth:`ControlPlaneBinaries.find` in
            ``assets`` (else ``$KUBEBUILDER_ASSETS``, else scripts/kube-up's cache).
        :param state_dir: keep the state there (and leave it) instead of a temporary directory.
        :param authorization_mode: ``--authorization-mode``, e.g. ``RBAC`` to test roles.
        :param apiserver_args: more arguments of kube-apiserver.
        """
        self._crds = list(crds)
        self._binaries = binaries
        self._assets = assets
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._own_state = state_dir is None
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.authorization_mode = authorization_mode
        self.apiserver_args = tuple(apiserver_args)
        self._processes: list[_Process] = []
        self._port: int | None = None
        self._token: str | None = None
        self._opener: urllib.request.OpenerDirector | None = None

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        return f"<{type(self).__name__} {where}>"

    # -------------------------------------------------------------------------- what it serves

    @property
    def binaries(self) -> ControlPlaneBinaries:
        if self._binaries is None:
            self._binaries = ControlPlaneBinaries.find(self._assets)
        return self._binaries

    @property
    def state_dir(self) -> Path:
        if self._state_dir is None:
            raise ControlPlaneError("The control plane has no state before it starts.")
        return self._state_dir

    @property
    def port(self) -> int:
        if self._port is None:
            raise ControlPlaneError("The control plane is not running.")
        return self._port

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        if self._token is None:
            raise ControlPlaneError("The control plane is not running.")
        return self._token

    @property
    def ca_path(self) -> Path:
        """The API server's certificate (self-signed: it is its own CA)."""
        return self.state_dir / "tls.crt"

    @property
    def kubeconfig(self) -> Path:
        """A kubeconfig for the server (context ``trioperator-local``, namespace ``default``)."""
        return self.state_dir / "kubeconfig"

    # -------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> RealControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd and kube-apiserver, wait until both are ready, install the CRDs."""
        if self._processes or self._port is not None:
            raise ControlPlaneError("The control plane is already running.")
        binaries = self.binaries
        version = apiserver_version(binaries.kube_apiserver)
        if self._state_dir is None:
            self._state_dir = Path(tempfile.mkdtemp(prefix="trioperator-control-plane."))
        state = self._state_dir
        try:
            api_port, etcd_port, peer_port = free_ports(3)
            self._token = prepare_state(state, api_port)
            self._port = api_port
            deadline = time.monotonic() + self.start_timeout
            import urllib.request

            context = ssl.create_default_context(cafile=str(self.ca_path))
            # No proxies from the environment for a server on loopback.
            self._opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
            )
            etcd = self._launch("etcd", etcd_command(binaries.etcd, state, etcd_port, peer_port))
            self._await(etcd, f"http://127.0.0.1:{etcd_port}/health", deadline)
            apiserver = self._launch(
                "kube-apiserver",
                apiserver_command(
                    binaries.kube_apiserver,
                    state,
                    api_port,
                    etcd_port,
                    authorization_mode=self.authorization_mode,
                    extra_args=self.apiserver_args,
                    version=version,
                ),
            )
            self._await(apiserver, f"{self.url}/readyz", deadline)
            if self._crds:
                self.install_crds(self._crds, timeout=max(deadline - time.monotonic(), 1.0))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the servers (the API server first: it is etcd's client); remove the state if
        it was a temporary directory. Safe to call more than once."""
        processes, self._processes = self._processes, []
        try:
            for process in reversed(processes):
                process.stop(self.stop_timeout)
        finally:
            self._port = None
            self._token = None
            self._opener = None
            if self._own_state and self._state_dir is not None:
                shutil.rmtree(self._state_dir, ignore_errors=True)
                self._state_dir = None

    def _launch(self, name: str, command: list[str]) -> _Process:
        process = _Process(name, command, self.state_dir / f"{name}.log")
        self._processes.append(process)
        return process

    def _await(self, process: _Process, url: str, deadline: float) -> None:
        import http.client

        last = ""
        while True:
            process.check_alive()
            try:
                self._get(url)
                return
            except (OSError, http.client.HTTPException, ControlPlaneError) as exc:
                last = str(exc) or type(exc).__name__
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{process.name} is not ready after {self.start_timeout}s ({url}: {last}); "
                    f"the end of its log:\n{process.tail()}"
                )
            time.sleep(POLL_INTERVAL)

    # -------------------------------------------------------------------------- requests

    def _get(self, url: str) -> bytes:
        import urllib.error
        import urllib.request

        if self._opener is None:
            raise ControlPlaneError("The control plane is not running.")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with self._opener.open(request, timeout=REQUEST_TIMEOUT) as response:
                body: bytes = response.read()
        except urllib.error.HTTPError as exc:
            exc.close()
            raise ControlPlaneRequestError(f"GET {url}: HTTP {exc.code}", exc.code) from None
        return body

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """One request to the API server (``path`` like ``/api/v1/namespaces``); the decoded
        JSON answer. An error status raises :class:`ControlPlaneRequestError` (``.status``)."""
        import http.client
        import urllib.error
        import urllib.request

        if self._opener is None:
            raise ControlPlaneError("The control plane is not running.")
        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=REQUEST_TIMEOUT) as response:
                raw: bytes = response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                detail = exc.read()[:2000].decode(errors="replace")
            raise ControlPlaneRequestError(
                f"{method} {path}: HTTP {exc.code}: {detail}", exc.code
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ControlPlaneError(f"{method} {path}: {exc!r}") from exc
        return json.loads(raw) if raw else None

    def install_crds(
        self,
        sources: Iterable[CRDSource],
        *,
        timeout: float = START_TIMEOUT,
    ) -> list[str]:
        """Apply these CRDs (server-side apply: installing again updates them) and wait until
        the server has established them; return their names."""
        crds = [crd for source in sources for crd in load_crds(source)]
        names: list[str] = []
        for crd in crds:
            name = str((crd.get("metadata") or {}).get("name") or "")
            if not name:
                raise ValueError("A CustomResourceDefinition without metadata.name.")
            self.request(
                "PATCH",
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                crd,
                content_type="application/apply-patch+yaml",  # JSON is YAML
                params={"fieldManager": "trioperator-testing", "force": "true"},
            )
            names.append(name)
        deadline = time.monotonic() + timeout
        for name in names:
            while not self._established(name):
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"The CRD {name} is not established after {timeout}s.")
                time.sleep(POLL_INTERVAL)
        return names

    def _established(self, name: str) -> bool:
        crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def create_namespace(
        self, prefix: str = "test-", *, labels: Mapping[str, str] | None = None
    ) -> str:
        """A new namespace named ``prefix`` + random letters; returns its name."""
        metadata: Obj = {"generateName": prefix}
        if labels:
            metadata["labels"] = dict(labels)
        created = self.request("POST", "/api/v1/namespaces", {"metadata": metadata})
        return str(created["metadata"]["name"])

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run kubectl against this server; its standard output."""
        if self.binaries.kubectl is None:
            raise ControlPlaneError("No kubectl was found (KUBEBUILDER_ASSETS or $PATH).")
        result = subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout


def real_control_plane(
    *,
    crds: Iterable[CRDSource] = (),
    assets: str | os.PathLike[str] | None = None,
    start_timeout: float = START_TIMEOUT,
    stop_timeout: float = STOP_TIMEOUT,
) -> RealControlPlane:
    """``with real_control_plane(crds=[...]) as plane:`` — see :class:`RealControlPlane`."""
    return RealControlPlane(
        crds=crds, assets=assets, start_timeout=start_timeout, stop_timeout=stop_timeout
    )


# ------------------------------------------------------------------------------ for scripts/kube-up

_USAGE = """usage (scripts/kube-up):
  controlplane.py prepare STATE PORT          files in STATE, kubeconfig for PORT; prints the token
  controlplane.py etcd-command ETCD STATE CLIENT_PORT PEER_PORT
  controlplane.py apiserver-command APISERVER STATE PORT ETCD_PORT AUTHZ [EXTRA_ARG...]
The commands print one argument per line."""


def main(argv: Sequence[str]) -> int:
    """The shared start logic for shell scripts, one argument per line on stdout."""
    try:
        match list(argv):
            case ["prepare", state, port]:
                print(prepare_state(state, int(port)))
            case ["etcd-command", etcd, state, client_port, peer_port]:
                print("\n".join(etcd_command(etcd, state, int(client_port), int(peer_port))))
            case ["apiserver-command", apiserver, state, port, etcd_port, authz, *extra]:
                command = apiserver_command(
                    apiserver,
                    state,
                    int(port),
                    int(etcd_port),
                    authorization_mode=authz,
                    extra_args=extra,
                )
                print("\n".join(command))
            case _:
                print(_USAGE, file=sys.stderr)
                return 2
    except (ControlPlaneError, ValueError, OSError) as exc:
        print(f"controlplane.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
