"""The operator's servers under attack (issue #26): what an attacker on the network gets, and
what the operator's real work suffers meanwhile.

For each attack, a fresh operator process (benchmarks/operators/attack_target.py: a validating
handler, a create handler, a probe; a TLS ``WebhookServer`` on loopback with a managed
ValidatingWebhookConfiguration; ``-L`` and ``--metrics`` on their own ports) is started under
``ulimit -n 1024`` (RLIMIT_NOFILE set in the child). When it answers reviews, the attack starts
from this process on loopback, bounded in connections and time, while:

* real reviews go on, one at a time: dry-run creates through the real API server that the
  webhook reviews (a review counts only when the handler's warning comes back, as in
  bench_admission.py); their p50/p95 and failures are reported;
* the liveness endpoint is asked every 0.5 s (2 s timeout);
* the operator's RSS is sampled from ``/proc/<pid>/status`` every 50 ms (peak - the RSS before
  the attack), and its ``VmHWM`` before and after;
* midway, an object is created for real and must get its create handler's result in its
  status (the watch still works);
* every attacker connection records when it was closed and what it got (a status, or closed
  without a word).

"left open" counts the attacker's connections still open when the attack's timeout (the
setting named in the row) plus 2 s has passed. The log is scanned for tracebacks, EMFILE and
the servers' rate-limited notices. The operator's own serving timeouts are small by default to
keep the run short (``--timeouts small``: handshake/header 3 s, idle/body/send 5 s);
``--timeouts default`` uses the settings' defaults (10/30/10/30/30 s).

    .venv/bin/python benchmarks/bench_attacks.py                      # every attack, ~6 min
    .venv/bin/python benchmarks/bench_attacks.py --timeouts default --only idle-tcp,slowloris

The cluster is the shared local one (``scripts/kube-up``) unless ``--kubeconfig`` or
``TRIOPERATOR_KUBECONFIG`` says otherwise. The run creates the CRD (benchmarks/crd.yaml) if
missing and a namespace of its own, and removes the namespace and webhook configuration after.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel
import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_admission import cpu_seconds, free_port, kubeconfig_path, kubectl_binary  # noqa: E402
from trioperator._client.api import APIClient  # noqa: E402
from trioperator._client.config import load_kubeconfig  # noqa: E402
from trioperator._client.credentials import Vault  # noqa: E402
from trioperator._client.settings import NetworkingSettings  # noqa: E402

OPERATOR = ROOT / "benchmarks" / "operators" / "attack_target.py"
CRD = ROOT / "benchmarks" / "crd.yaml"
GROUP_PATH = "/apis/bench.trioperator.dev/v1"
PROOF = "checked under attack"
NOFILE = 1024
MiB = 1024 * 1024

SMALL = {
    "handshake_timeout": 3,
    "idle_timeout": 5,
    "header_timeout": 3,
    "body_timeout": 5,
    "send_timeout": 5,
}
DEFAULT = {
    "handshake_timeout": 10,
    "idle_timeout": 30,
    "header_timeout": 10,
    "body_timeout": 30,
    "send_timeout": 30,
}


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def limit_descriptors() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


# -- the attacker's connections ----------------------------------------------------------------


@dataclasses.dataclass
class Conn:
    opened: float | None = None
    closed: float | None = None
    answered: float | None = None
    received: bytes = b""
    sent: int = 0
    stream: trio.abc.Stream | None = None

    def outcome(self) -> str:
        if self.received.startswith(b"HTTP/1.1 "):
            return self.received[9:12].decode()
        if self.closed is None:
            return "open"
        if self.opened is None:
            return "refused"  # connect() or the TLS handshake failed
        return "closed"


Script = Callable[[trio.abc.Stream, Conn], Awaitable[None]]


class Attack:
    """Connections of one attack: each opened, driven by a script, and watched for its end."""

    def __init__(self, port: int, *, tls: bool, handshake: bool = True) -> None:
        self.port = port
        self.tls = tls
        self.handshake = handshake
        self.conns: list[Conn] = []
        self.started = 0.0
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self.context = context

    def now(self) -> float:
        return trio.current_time() - self.started

    async def run_one(self, script: Script, conn: Conn) -> None:
        try:
            tcp = await trio.open_tcp_stream("127.0.0.1", self.port)
        except OSError:
            conn.closed = self.now()
            return
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream: trio.abc.Stream = tcp
        conn.stream = tcp
        if self.tls and self.handshake:
            stream = trio.SSLStream(tcp, self.context, server_hostname="127.0.0.1")
            try:
                await stream.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                conn.closed = self.now()
                await trio.aclose_forcefully(tcp)
                return
            conn.stream = stream
        conn.opened = self.now()
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                try:
                    while True:
                        data = await stream.receive_some(65536)
                        if not data:
                            break
                        if conn.answered is None:
                            conn.answered = self.now()
                        if len(conn.received) < 4096:
                            conn.received += data
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                conn.closed = self.now()
                nursery.cancel_scope.cancel()

            nursery.start_soon(read)
            try:
                await script(stream, conn)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            await trio.sleep_forever()

    async def open(self, nursery: trio.Nursery, count: int, script: Script) -> None:
        """Open ``count`` connections (100 at a time) and leave them to their script."""
        self.started = self.started or trio.current_time()
        for start in range(0, count, 100):
            async with trio.open_nursery() as batch:
                for _ in range(min(100, count - start)):
                    conn = Conn()
                    self.conns.append(conn)
                    nursery.start_soon(self.run_one, script, conn)
                    batch.start_soon(self._wait_opened, conn)

    async def _wait_opened(self, conn: Conn) -> None:
        with trio.move_on_after(10):
            while conn.opened is None and conn.closed is None:  # noqa: ASYNC110
                await trio.sleep(0.01)

    def open_at(self, at: float) -> int:
        return sum(1 for c in self.conns if c.closed is None or c.closed > at)

    def summary(self) -> str:
        outcomes = collections.Counter(c.outcome() for c in self.conns)
        parts = []
        for outcome, count in outcomes.most_common():
            times = sorted(
                c.answered if c.answered is not None else c.closed
                for c in self.conns
                if c.outcome() == outcome and (c.closed or c.answered) is not None
            )
            # Those closed within 1 s of the attack's start, and the rest (at their timeout).
            early = [x for x in times if x < 1]
            late = [x for x in times if x >= 1]
            spans = []
            if early:
                spans.append(f"{len(early)} at once")
            if late:
                span = f"{late[0]:.1f}" + (f"-{late[-1]:.1f}" if late[-1] - late[0] >= 0.1 else "")
                spans.append(f"{len(late)} at {span} s")
            what = "answered" if outcome.isdigit() else ""
            parts.append(f"{count}x {outcome}" + (f" ({what} {', '.join(spans)})" if spans else ""))
        return ", ".join(parts).replace("( ", "(")

    async def close_all(self) -> None:
        for conn in self.conns:
            if conn.stream is not None:
                await trio.aclose_forcefully(conn.stream)


async def idle(stream: trio.abc.Stream, conn: Conn) -> None:
    await trio.sleep_forever()


def trickle(head: bytes, every: float) -> Script:
    async def script(stream: trio.abc.Stream, conn: Conn) -> None:
        for byte in head:
            await stream.send_all(bytes([byte]))
            conn.sent += 1
            await trio.sleep(every)
        await trio.sleep_forever()

    return script


def send(data: bytes, then: bytes = b"") -> Script:
    """Send ``data`` at once, then ``then`` (e.g. a declared body) as fast as it is taken."""

    async def script(stream: trio.abc.Stream, conn: Conn) -> None:
        await stream.send_all(data)
        conn.sent += len(data)
        view = memoryview(then)
        for offset in range(0, len(view), 256 * 1024):
            await stream.send_all(view[offset : offset + 256 * 1024])
            conn.sent += min(256 * 1024, len(view) - offset)
        await trio.sleep_forever()

    return script


def byte_by_byte(data: bytes) -> Script:
    async def script(stream: trio.abc.Stream, conn: Conn) -> None:
        for byte in data:
            await stream.send_all(bytes([byte]))
            conn.sent += 1
            await trio.lowlevel.checkpoint()
        await trio.sleep_forever()

    return script


def post(path: str, body: bytes | int, extra: str = "") -> bytes:
    length = body if isinstance(body, int) else len(body)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n{extra}\r\n"
    ).encode()
    return head + (b"" if isinstance(body, int) else body)


def review_body(namespace: str, size: int, *, shape: str) -> bytes:
    """A valid AdmissionReview of a BenchObject of about ``size`` bytes: a long string in its
    spec (``blob``), or as many empty objects as fit (``objects``: the worst decoded size)."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "bench.trioperator.dev", "version": "v1", "kind": "BenchObject"},
            "resource": {
                "group": "bench.trioperator.dev",
                "version": "v1",
                "resource": "benchobjects",
            },
            "name": "big",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "attacker"},
            "object": {
                "apiVersion": "bench.trioperator.dev/v1",
                "kind": "BenchObject",
                "metadata": {
                    "name": "big",
                    "namespace": namespace,
                    "labels": {"bench-attack": "reviewed"},
                },
                "spec": {"pad": "@PAD@"},
            },
            "oldObject": None,
            "dryRun": True,
        },
    }
    skeleton = json.dumps(review).encode()
    room = size - len(skeleton)
    if shape == "blob":
        pad = b'"' + b"x" * (room - 2) + b'"'
    else:
        count = (room - 1) // 3
        pad = b"[" + b"{}," * count + b"{}]"
    return skeleton.replace(b'"@PAD@"', pad)


# -- the operator ------------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    name: str
    what: str
    timeouts: str
    reviews: list[float] = dataclasses.field(default_factory=list)
    failed: int = 0
    rss_peak: float = 0.0
    hwm_delta: float = 0.0
    left_open: str = "-"
    got: str = "-"
    liveness: str = "-"
    watch: str = "-"
    log: str = "-"
    extra: str = ""
    died: str = ""

    def quantile(self, q: float) -> float:
        ordered = sorted(self.reviews)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0


class Bench:
    def __init__(self, args: argparse.Namespace, kubeconfig: str, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.namespace = f"bench-attack-{uuid.uuid4().hex[:6]}"
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}
        self.kubectl = kubectl_binary()
        self.api = APIClient(Vault({"bench": load_kubeconfig(kubeconfig)}), NetworkingSettings())
        self.counter = 0
        self.webhook_port = free_port()
        self.liveness_port = free_port()
        self.metrics_port = free_port()
        self.webhook_path = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "none.log"

    def kubectl_run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run([self.kubectl, *args], env=self.env, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def prepare(self) -> None:
        self.kubectl_run("apply", "-f", str(CRD))
        self.kubectl_run(
            "wait", "--for=condition=Established", "crd/benchobjects.bench.trioperator.dev"
        )
        self.kubectl_run("create", "namespace", self.namespace)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        certs = self.workdir / "certs"
        certs.mkdir()
        (certs / "tls.crt").write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
        (certs / "tls.key").write_bytes(cert.private_key_pem.bytes())
        (certs / "ca.crt").write_bytes(ca.cert_pem.bytes())

    def cleanup(self) -> None:
        self.kubectl_run("delete", "namespace", self.namespace, "--wait=false", check=False)
        self.kubectl_run(
            "delete", "validatingwebhookconfiguration", self.config_name, "--ignore-not-found",
            check=False,
        )  # fmt: skip

    @property
    def config_name(self) -> str:
        return f"{self.namespace}.bench.trioperator.dev"

    async def review(self) -> tuple[float, bool]:
        """One dry-run create that the webhook reviews: its latency, and whether it was."""
        self.counter += 1
        body = {
            "apiVersion": "bench.trioperator.dev/v1",
            "kind": "BenchObject",
            "metadata": {
                "name": f"adm-{self.counter}",
                "namespace": self.namespace,
                "labels": {"bench-attack": "reviewed"},
            },
            "spec": {"index": self.counter},
        }
        path = f"{GROUP_PATH}/namespaces/{self.namespace}/benchobjects"
        started = time.perf_counter()
        try:
            with trio.fail_after(20):
                response = await self.api.request_raw(
                    "POST", path, params={"dryRun": "All"}, payload=body
                )
        except Exception:
            return time.perf_counter() - started, False
        return time.perf_counter() - started, PROOF in response.headers.get("warning", "")

    async def start_operator(self, name: str, serving: dict[str, Any]) -> None:
        self.log_path = self.workdir / f"{name}.log"
        env = {
            **self.env,
            "ATTACK_WEBHOOK_PORT": str(self.webhook_port),
            "ATTACK_WEBHOOK_CERT": str(self.workdir / "certs/tls.crt"),
            "ATTACK_WEBHOOK_KEY": str(self.workdir / "certs/tls.key"),
            "ATTACK_WEBHOOK_CA": str(self.workdir / "certs/ca.crt"),
            "ATTACK_WEBHOOK_NAME": self.config_name,
            "ATTACK_SERVING": json.dumps(serving),
            "PYTHONUNBUFFERED": "1",
        }
        command = [
            sys.executable, "-m", "trioperator", "run", "--standalone", "-n", self.namespace,
            "-L", f"http://127.0.0.1:{self.liveness_port}/healthz",
            "--metrics", f"http://127.0.0.1:{self.metrics_port}/metrics", str(OPERATOR),
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: ASYNC220 -- it returns at once
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                preexec_fn=limit_descriptors,
            )
        with trio.fail_after(90):
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"The operator exited; see {self.log_path}")
                if (await self.review())[1]:
                    break
                await trio.sleep(0.2)
        if not self.webhook_path:
            kind = "validatingwebhookconfiguration"
            config = json.loads(self.kubectl_run("get", kind, self.config_name, "-ojson"))
            url = config["webhooks"][0]["clientConfig"]["url"]
            self.webhook_path = "/" + url.split("/", 3)[3]
        for _ in range(20):  # warm-up
            await self.review()

    async def stop_operator(self) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                await trio.to_thread.run_sync(partial(process.wait, 30))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        return process.returncode

    async def liveness(self) -> tuple[bool, float]:
        started = time.perf_counter()
        with trio.move_on_after(2):
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", self.liveness_port)
                async with stream:
                    await stream.send_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                    data = await stream.receive_some(4096)
                    return data.startswith(b"HTTP/1.1 200"), time.perf_counter() - started
            except OSError:
                pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        return False, time.perf_counter() - started

    async def watch_check(self, name: str) -> str:
        """Create an object for real; how long until its handler's result is in its status."""
        path = f"{GROUP_PATH}/namespaces/{self.namespace}/benchobjects"
        body = {
            "apiVersion": "bench.trioperator.dev/v1",
            "kind": "BenchObject",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {},
        }
        started = time.perf_counter()
        try:
            await self.api.request_raw("POST", path, payload=body)
        except Exception as exc:
            return f"create failed: {exc!r}"[:60]
        with trio.move_on_after(20):
            while True:
                response = await self.api.request_raw("GET", f"{path}/{name}")
                status = json.loads(response.body).get("status") or {}
                if status.get("create_fn"):
                    return f"handled in {time.perf_counter() - started:.1f} s"
                await trio.sleep(0.1)
        return "NOT handled in 20 s"

    def scan_log(self) -> str:
        text = self.log_path.read_text(errors="replace")
        tracebacks = text.count("Traceback")
        emfile = len(re.findall(r"EMFILE|Too many open files", text))
        notices = len(re.findall(r"Cannot accept|Refused connections", text))
        slow = len(re.findall(r"Answered 408|did not finish the handshake", text))
        answered = len(re.findall(r"Answered (400|413|431|503)", text))
        return (
            f"{tracebacks} tracebacks, {emfile} EMFILE, {notices} refused/cannot-accept notices,"
            f" {slow} slow-peer notices, {answered} error-answer lines"
        )

    async def measure(
        self,
        name: str,
        what: str,
        *,
        timeouts: str,
        attack: Attack,
        launch: Callable[[trio.Nursery], Awaitable[None]],
        wait: float,
        until_closed: bool = False,
        cpu_per_byte: bool = False,
        review_gap: float = 0.02,
        count_open: bool = True,
    ) -> Row:
        serving = SMALL if timeouts == "small" else DEFAULT
        row = Row(name, what, timeouts)
        await self.start_operator(name, serving)
        assert self.process is not None
        pid = self.process.pid
        hwm_before = status_kb(pid, "VmHWM")
        rss_before = status_kb(pid, "VmRSS")
        peak = rss_before
        probes: list[tuple[bool, float]] = []
        watch: list[str] = []
        stop = trio.Event()
        cpu_before = cpu_seconds(pid)

        async def reviews() -> None:
            while not stop.is_set():
                elapsed, ok = await self.review()
                row.reviews.append(elapsed)
                row.failed += not ok
                await trio.sleep(review_gap)

        async def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                try:
                    peak = max(peak, status_kb(pid, "VmRSS"))
                except OSError:
                    return
                await trio.sleep(0.05)

        async def probe() -> None:
            while not stop.is_set():
                probes.append(await self.liveness())
                await trio.sleep(0.5)

        async def check_watch() -> None:
            await trio.sleep(min(wait / 2, 3))
            watch.append(await self.watch_check(f"watch-{name}"))

        async with trio.open_nursery() as attackers:
            async with trio.open_nursery() as observers:
                observers.start_soon(sample)
                if not cpu_per_byte:
                    observers.start_soon(reviews)
                    observers.start_soon(probe)
                    observers.start_soon(check_watch)
                attack.started = trio.current_time()
                await launch(attackers)
                deadline = attack.started + wait
                while trio.current_time() < deadline:
                    if until_closed and all(c.closed is not None for c in attack.conns):
                        break
                    if self.process.poll() is not None:
                        row.died = f"operator exited (rc {self.process.returncode})"
                        break
                    await trio.sleep(0.1)
                cpu_after = cpu_seconds(pid) if self.process.poll() is None else cpu_before
                if count_open:
                    row.left_open = str(attack.open_at(attack.now()))
                while not watch and not cpu_per_byte and self.process.poll() is None:  # noqa: ASYNC110
                    await trio.sleep(0.1)  # the watch check takes its time
                stop.set()
                observers.cancel_scope.deadline = trio.current_time() + 25
            attackers.cancel_scope.cancel()
        await attack.close_all()
        try:
            row.hwm_delta = (status_kb(pid, "VmHWM") - hwm_before) / 1024
        except OSError:
            row.hwm_delta = float("nan")
        row.rss_peak = (peak - rss_before) / 1024
        row.got = attack.summary()
        if probes:
            ok = sum(1 for good, _ in probes if good)
            row.liveness = f"{ok}/{len(probes)} ok, max {max(t for _, t in probes):.2f} s"
        row.watch = watch[0] if watch else "-"
        if cpu_per_byte:
            sent = sum(c.sent for c in attack.conns)
            cpu = cpu_after - cpu_before
            row.extra = f"server CPU {cpu * 1e6 / max(sent, 1):.1f} µs/byte ({sent} bytes sent)"
        rc = await self.stop_operator()
        if rc not in (0, None) and not row.died:
            row.died = f"operator exit code {rc} on SIGINT"
        row.log = self.scan_log()
        self.kubectl_run(
            "delete", "benchobject", f"watch-{name}", "-n", self.namespace, "--wait=false",
            "--ignore-not-found", check=False,
        )  # fmt: skip
        return row


# -- the attacks -------------------------------------------------------------------------------


def attacks(bench: Bench, timeouts: str) -> dict[str, Callable[[], Awaitable[Row]]]:
    t = SMALL if timeouts == "small" else DEFAULT
    grace = 2.0
    hook, live = bench.webhook_port, bench.liveness_port

    def on(port: int, *, tls: bool, handshake: bool = True) -> Attack:
        return Attack(port, tls=tls, handshake=handshake)

    def run(
        name: str, what: str, attack: Attack, count: int, script: Script, wait: float, **kw: Any
    ) -> Callable[[], Awaitable[Row]]:
        async def launch(nursery: trio.Nursery) -> None:
            await attack.open(nursery, count, script)

        return partial(
            bench.measure, name, what, timeouts=timeouts, attack=attack, launch=launch,
            wait=wait, **kw,
        )  # fmt: skip

    def path() -> str:
        return bench.webhook_path

    def lazy(make: Callable[[], Script]) -> Script:
        async def script(stream: trio.abc.Stream, conn: Conn) -> None:
            await make()(stream, conn)

        return script

    slow_head = b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"a" * 200
    big_ok: dict[str, bytes] = {}

    def big(size: int, shape: str) -> bytes:
        key = f"{size}-{shape}"
        if key not in big_ok:
            big_ok[key] = post(path(), review_body(bench.namespace, size, shape=shape))
        return big_ok[key]

    def head_and_body(request: bytes) -> tuple[bytes, bytes]:
        end = request.index(b"\r\n\r\n") + 4
        return request[:end], request[end:]

    async def reconnecting(attack: Attack, slots: int, nursery: trio.Nursery) -> None:
        """``slots`` idle connections, each opened again as soon as the server closes it."""

        async def slot() -> None:
            while True:
                conn = Conn()
                attack.conns.append(conn)
                await attack.run_one(idle, conn)
                await trio.sleep(0.05)

        for _ in range(slots):
            nursery.start_soon(slot)

    def run_reconnecting(name: str, what: str, slots: int) -> Callable[[], Awaitable[Row]]:
        attack = on(hook, tls=True)
        return partial(
            bench.measure, name, what, timeouts=timeouts, attack=attack,
            launch=partial(reconnecting, attack, slots), wait=3 * t["idle_timeout"] + 3,
            review_gap=t["idle_timeout"] + 1.0, count_open=False,
        )  # fmt: skip

    nested = b'{"apiVersion": "admission.k8s.io/v1", "request": ' + b"[" * 100_000 + b"]" * 100_000
    nested += b"}"
    invalid = (
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
        b'"request": {"uid": "\xff\xfe\xc3\x28", "object": {}}}'
    )
    chunked_body = post("/x", b"{" + b" " * 20_000 + b"}")
    return {
        "idle-tcp": run(
            "idle-tcp", "200 idle TCP connections (plain HTTP, the liveness port)",
            on(live, tls=False), 200, idle, t["idle_timeout"] + grace,
        ),
        "idle-tls": run(
            "idle-tls", "200 idle TLS connections (handshaken, no request; webhook port)",
            on(hook, tls=True), 200, idle, t["idle_timeout"] + grace,
        ),
        "silent-tls": run(
            "silent-tls", "200 TCP connections to the TLS port that never send a ClientHello",
            on(hook, tls=True, handshake=False), 200, idle, t["handshake_timeout"] + grace,
        ),
        "slowloris": run(
            "slowloris", "100 slowloris clients, 1 head byte/s (TLS, webhook port)",
            on(hook, tls=True), 100, trickle(slow_head, 1.0), t["header_timeout"] + grace,
        ),
        "slowloris-plain": run(
            "slowloris-plain", "100 slowloris clients, 1 head byte/s (plain, liveness port)",
            on(live, tls=False), 100, trickle(slow_head, 1.0), t["header_timeout"] + grace,
        ),
        "declared-1mb": run(
            "declared-1mb", "100 requests declaring a 1 MB body, sending none (TLS, webhook)",
            on(hook, tls=True), 100, lazy(lambda: send(post(path(), 1_000_000))),
            t["body_timeout"] + grace,
        ),
        "fd-1100": run(
            "fd-1100", "1,100 idle TCP connections to the webhook port (ulimit -n 1024)",
            on(hook, tls=True, handshake=False), 1100, idle, t["handshake_timeout"] + grace,
        ),
        "idle-tls-reconnecting": run_reconnecting(
            "idle-tls-reconnecting",
            "150 idle TLS connections, each opened again when closed; a real review every "
            "idle_timeout + 1 s",
            150,
        ),
        "large-15mib": run(
            "large-15mib", "8 concurrent 15 MiB valid reviews (a 15 MiB string in spec)",
            on(hook, tls=True), 8, lazy(lambda: send(big(15 * MiB, "blob"))), 60,
            until_closed=True,
        ),
        "large-15mib-objects": run(
            "large-15mib-objects", "8 concurrent 15 MiB valid reviews (spec: 5M empty objects)",
            on(hook, tls=True), 8, lazy(lambda: send(big(15 * MiB, "objects"))), 60,
            until_closed=True,
        ),
        "large-56mib": run(
            "large-56mib", "8 concurrent 56 MiB valid reviews",
            on(hook, tls=True), 8, lazy(lambda: send(*head_and_body(big(56 * MiB, "blob")))), 20,
            until_closed=True,
        ),
        "declared-100mb": run(
            "declared-100mb", "a 100 MB declared body, sent (TLS, webhook)",
            on(hook, tls=True), 1,
            lazy(lambda: send(post(path(), 100_000_000), then=b"x" * 100_000_000)), 20,
            until_closed=True,
        ),
        "nested": run(
            "nested", "JSON nested 100k levels (TLS, webhook)",
            on(hook, tls=True), 1, lazy(lambda: send(post(path(), nested))), 10,
            until_closed=True,
        ),
        "invalid-utf8": run(
            "invalid-utf8", "invalid UTF-8 inside a JSON string (TLS, webhook)",
            on(hook, tls=True), 1, lazy(lambda: send(post(path(), invalid))), 10,
            until_closed=True,
        ),
        "random-tls": run(
            "random-tls", "10 x 64 KiB of random bytes inside TLS (webhook)",
            on(hook, tls=True), 10, lazy(lambda: send(os.urandom(65536))), 10,
            until_closed=True,
        ),
        "random-plain": run(
            "random-plain", "10 x 64 KiB of random bytes (plain, liveness port)",
            on(live, tls=False), 10, lazy(lambda: send(os.urandom(65536))), 10,
            until_closed=True,
        ),
        "bytes-1-tls-cpu": run(
            "bytes-1-tls-cpu", "100 requests sent 1 byte per write (TLS, webhook), no reviews",
            on(hook, tls=True), 100, byte_by_byte(chunked_body), 15, until_closed=True,
            cpu_per_byte=True,
        ),
        "bytes-1-plain-cpu": run(
            "bytes-1-plain-cpu", "100 requests sent 1 byte per write (plain, liveness), no reviews",
            on(live, tls=False), 100, byte_by_byte(chunked_body), 15, until_closed=True,
            cpu_per_byte=True,
        ),
        "bytes-1-tls": run(
            "bytes-1-tls", "100 requests sent 1 byte per write (TLS, webhook)",
            on(hook, tls=True), 100, byte_by_byte(chunked_body), 15, until_closed=True,
        ),
    }  # fmt: skip


def report(rows: list[Row]) -> str:
    lines = [
        "| attack | timeouts | real reviews p50 / p95 ms (failed/total) | peak RSS delta MiB "
        "(sampled / VmHWM) | left open after timeout+2 s | what the attacker got (s after "
        "start) | liveness | watch | log | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        reviews = (
            f"{row.quantile(0.5):.1f} / {row.quantile(0.95):.1f} ({row.failed}/{len(row.reviews)})"
            if row.reviews
            else "-"
        )
        notes = "; ".join(x for x in [row.extra, row.died] if x) or ""
        lines.append(
            f"| {row.what} | {row.timeouts} | {reviews} | {row.rss_peak:.0f} / {row.hwm_delta:.0f}"
            f" | {row.left_open} | {row.got} | {row.liveness} | {row.watch} | {row.log} "
            f"| {notes} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[Row]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    kubeconfig = await trio.to_thread.run_sync(kubeconfig_path, args.kubeconfig)
    workdir = Path(tempfile.mkdtemp(prefix="bench-attacks-"))
    bench = Bench(args, kubeconfig, workdir)
    rows: list[Row] = []
    bench.prepare()
    try:
        async with bench.api:
            for timeouts in args.timeouts:
                table = attacks(bench, timeouts)
                for name in args.only or list(table):
                    print(f"-- {name} ({timeouts} timeouts)", file=sys.stderr, flush=True)
                    try:
                        row = await table[name]()
                    finally:
                        await bench.stop_operator()
                    rows.append(row)
                    print(report([row]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        bench.cleanup()
        print(f"Logs: {workdir}", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig")
    parser.add_argument(
        "--timeouts",
        type=lambda s: s.split(","),
        default=["small"],
        help="small, default, or both (small,default): the operator's serving timeouts",
    )
    parser.add_argument("--only", type=lambda s: s.split(","), help="attacks by name")
    args = parser.parse_args()
    rows = trio.run(main_async, args)
    print(report(rows))


if __name__ == "__main__":
    main()
