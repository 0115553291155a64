"""The chaos tier: a real operator process against a local control plane that misbehaves.

Every test here is marked ``chaos`` (``just chaos``; the other recipes exclude it). The control
plane is this tier's own (``scripts/kube-up`` with its own state dir and port, default
``/tmp/trioperator-chaos.<uid>`` and 18443), because its API server and etcd get killed: the
e2e tier's shared instance is never touched. Each case gets its own namespace and operator.

What a case checks, whatever the fault:

- no handler run is lost: every object ends handled (its last spec is the handled one, and its
  result is in the status), every deleted object is gone after its deletion handler ran;
- no completed run is repeated, except where the at-least-once contract allows it (the process
  died or a write of the outcome failed between the handler's end and the stored outcome):
  such repeats are counted with their cause, any other repeat fails the case; a run whose
  result was stored when the operator was killed (read from the API right after the kill) is
  never repeated: such repeats are counted on their own and fail the case;
- the liveness endpoint answers 500 while a watch is dead or stalled (where the fault lasts
  long enough to tell) and 200 again after the recovery;
- the operator exits cleanly (code 0) on SIGTERM at the end.

Each case adds a row to ``$TRIOPERATOR_CHAOS_RESULTS`` (default: ``results.md`` in the state
dir), printed at the end of the session: the numbers of tests/chaos/RESULTS.md.
"""

from __future__ import annotations

import collections
import http.client
import itertools
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.proxy import Policy, Proxy

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("TRIOPERATOR_CHAOS_DIR", f"/tmp/trioperator-chaos.{os.getuid()}"))
PORT = int(os.environ.get("TRIOPERATOR_CHAOS_PORT", "18443"))
RESULTS = Path(os.environ.get("TRIOPERATOR_CHAOS_RESULTS", str(STATE / "results.md")))
GROUP, VERSION, PLURAL = "chaos.trioperator.dev", "v1", "chaosobjects"
HANDLERS = {"create_fn": "create", "update_fn/spec": "update"}
"""Where each handler's result is in the status (the delete handler returns none)."""
STORED_RERUN = "re-runs of results stored before the SIGKILL (must be 0)"
DIFFBASE = "kopf.zalando.org/last-handled-configuration"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "chaosobject", "kind": "ChaosObject"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                            # The handlers' results must be integers: a string is a 422.
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                                "properties": {
                                    handler: {
                                        "type": "object",
                                        "properties": {"value": {"type": "integer"}},
                                    }
                                    for handler in ("create_fn", "update_fn/spec")
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.chaos)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Only after a run that had chaos cases: other tiers must not show an old table as theirs.
    ran = any(
        isinstance(report, pytest.TestReport) and "chaos" in report.keywords
        for reports in terminalreporter.stats.values()
        for report in reports
    )
    if ran and RESULTS.exists() and RESULTS.stat().st_size:
        terminalreporter.write_sep("=", f"chaos results ({RESULTS})")
        terminalreporter.write_line(RESULTS.read_text())


# ------------------------------------------------------------------------- the control plane


class ControlPlane:
    """This tier's etcd + kube-apiserver: started, killed and restarted by their pid files."""

    def __init__(self) -> None:
        self.env = {
            **os.environ,
            "TRIOPERATOR_KUBE_DIR": str(STATE),
            "TRIOPERATOR_KUBE_PORT": str(PORT),
        }
        self.port = PORT
        self.etcd_port = PORT + 7347
        self.kubeconfig = self.up()
        self.token = (STATE / "tokens.csv").read_text().split(",", 1)[0]
        self.cafile = str(STATE / "tls.crt")
        self.ssl = ssl.create_default_context(cafile=self.cafile)

    def up(self) -> Path:
        """Start whatever of the two is not running (kube-up reuses the living one)."""
        result = subprocess.run(
            [str(ROOT / "scripts" / "kube-up")],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"scripts/kube-up failed:\n{result.stderr[-4000:]}")
        return Path(result.stdout.strip().splitlines()[-1])

    def down(self) -> None:
        """Stop both (scripts/kube-down, by their pid files); the state dir stays."""
        subprocess.run(
            [str(ROOT / "scripts" / "kube-down")],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def pid(self, name: str) -> int:
        return int((STATE / f"{name}.pid").read_text())

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        pid = self.pid(name)
        os.kill(pid, sig)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def compact(self) -> int:
        """Compact etcd's history up to now: older versions are gone for good (410 on resume)."""

        def call(path: str, payload: dict[str, Any]) -> Any:
            conn = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=10)
            try:
                conn.request("POST", path, json.dumps(payload))
                return json.loads(conn.getresponse().read())
            finally:
                conn.close()

        revision = int(call("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def kubeconfig_via(self, port: int, path: Path) -> Path:
        """A kubeconfig for a plain-HTTP proxy on ``port`` with this control plane's token."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "proxy",
                    "clusters": [
                        {"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{port}"}}
                    ],
                    "users": [{"name": "admin", "user": {"token": self.token}}],
                    "contexts": [
                        {"name": "proxy", "context": {"cluster": "proxy", "user": "admin"}}
                    ],
                }
            )
        )
        return path

    # A small synchronous client for the test's own writes; it outlives the control plane's
    # outages (it retries until the deadline), as a user's kubectl in a loop would.
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201),
        deadline: float = 90,
    ) -> tuple[int, Any]:
        until = time.monotonic() + deadline
        payload = json.dumps(body) if body is not None else None
        while True:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl, timeout=10)
            try:
                headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
                conn.request(method, path, payload, headers)
                response = conn.getresponse()
                data = response.read()
                if response.status in ok or response.status in (404, 409, 422):
                    return response.status, _decoded(data)
                error = f"HTTP {response.status}: {data[:200]!r}"
            except (OSError, http.client.HTTPException) as exc:
                error = repr(exc)
            finally:
                conn.close()
            if time.monotonic() > until:
                raise AssertionError(f"{method} {path} failed for {deadline}s: {error}")
            time.sleep(0.3)


def _decoded(data: bytes) -> Any:
    """A JSON body, or the text of one that is not JSON: e.g. the plain "404 page not found"
    of a path the API server does not route yet (a CRD created a moment ago)."""
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()
    try:
        status, _ = plane.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD
        )
        assert status in (201, 409)
        deadline = time.monotonic() + 60
        while plane.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}", ok=(200,))[0] != 200:
            assert time.monotonic() < deadline, "the CRD is not served"
            time.sleep(0.2)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            "| case | fault | objects | runs lost | duplicate runs (cause) | time to recover"
            " | peak RSS |\n|---|---|---|---|---|---|---|\n"
        )
        yield plane
    finally:
        # This tier's own plane: left running, it would keep holding its ports, which the
        # benchmarks' isolated cluster uses by default (18443, etcd 25790/25800).
        plane.down()


# ------------------------------------------------------------------------------ one case


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class OperatorRun:
    process: subprocess.Popen[bytes]
    log: Path
    peak_rss_kb: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def sample_rss(self) -> None:
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return
        match = re.search(r"VmHWM:\s+(\d+) kB", text)
        if match:
            self.peak_rss_kb = max(self.peak_rss_kb, int(match.group(1)))


@dataclass
class Case:
    """One chaos case: a namespace, the objects the test wants, the operator(s) serving them."""

    plane: ControlPlane
    name: str
    workdir: Path
    namespace: str = ""
    kubeconfig: Path | None = None
    handler_seconds: float = 0.05
    expected: dict[str, int | None] = field(default_factory=dict)
    """name -> the last spec value written, or ``None`` once deleted."""
    title: str = ""
    """The case's name in the results table."""
    owed_deletions: set[str] = field(default_factory=set)
    """Objects that had the operator's finalizer when deleted: their handler must run."""
    runs: list[OperatorRun] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    stored_at_kill: dict[int, set[tuple[str, str, Any]]] = field(default_factory=dict)
    """pid -> the (handler, object, value) runs whose results were in the API right after that
    process was killed: no later process may run them again."""
    terminated: set[int] = field(default_factory=set)
    liveness_port: int = 0
    liveness: list[tuple[float, int | None]] = field(default_factory=list)
    _polling: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.namespace = f"chaos-{self.workdir.name}"
        self.record = self.workdir / "runs.jsonl"
        self.plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        self.liveness_port = _free_port()
        threading.Thread(target=self._poll_liveness, daemon=True).start()

    # -------------------------------------------------------------- the operator process

    def start(self) -> OperatorRun:
        log = self.workdir / f"operator-{len(self.runs) + 1}.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig or self.plane.kubeconfig),
            "CHAOS_RECORD": str(self.record),
            "CHAOS_HANDLER_SECONDS": str(self.handler_seconds),
            "PYTHONPATH": str(ROOT),
        }
        command = [
            sys.executable,
            "-m",
            "trioperator",
            "run",
            str(Path(__file__).parent / "operator_app.py"),
            "--standalone",
            "-n",
            self.namespace,
            "-L",
            f"http://127.0.0.1:{self.liveness_port}/healthz",
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
            )
        run = OperatorRun(process, log)
        self.runs.append(run)
        deadline = time.monotonic() + 60
        while "The operator is ready" not in log.read_text(errors="replace"):
            assert process.poll() is None, f"the operator exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, (
                f"the operator is not ready:\n{log.read_text()[-3000:]}"
            )
            time.sleep(0.1)
        return run

    @property
    def current(self) -> OperatorRun:
        return self.runs[-1]

    def kill_operator(self) -> None:
        run = self.current
        run.sample_rss()
        self.killed.add(run.pid)
        run.process.kill()
        run.process.wait(10)
        self.stored_at_kill[run.pid] = self.stored_results()

    def stored_results(self) -> set[tuple[str, str, Any]]:
        """The runs whose results are in the API now: (handler, object name, value handled)."""
        _, listing = self.plane.request("GET", self.path(), ok=(200,))
        stored = set()
        for item in listing["items"]:
            status = item.get("status") or {}
            for key, handler in HANDLERS.items():
                result = status.get(key)
                if isinstance(result, dict) and "value" in result:
                    stored.add((handler, item["metadata"]["name"], result["value"]))
        return stored

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as Kubernetes stops a pod; returns the exit code."""
        run = self.current
        run.sample_rss()
        self.terminated.add(run.pid)
        run.process.send_signal(signal.SIGTERM)
        try:
            return run.process.wait(timeout)
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.wait(10)
            raise AssertionError(
                f"the operator did not exit in {timeout}s:\n{self.output()[-3000:]}"
            ) from None

    def output(self) -> str:
        return "\n".join(run.log.read_text(errors="replace") for run in self.runs)

    def wait_records(
        self, predicate: Callable[[dict[str, Any]], bool], count: int, timeout: float = 60
    ) -> None:
        """Wait until ``count`` handler records match ``predicate``."""
        deadline = time.monotonic() + timeout
        while sum(1 for line in self.records() if predicate(line)) < count:
            assert time.monotonic() < deadline, f"fewer than {count} matching records"
            time.sleep(0.02)

    def wait_running(self, timeout: float = 60) -> None:
        """Wait until a handler of the current process has started and not finished."""
        pid = self.current.pid
        deadline = time.monotonic() + timeout
        while True:
            lines = [line for line in self.records() if line["pid"] == pid]
            done = {(line["handler"], line["name"]) for line in lines if line["event"] == "done"}
            if any((x["handler"], x["name"]) not in done for x in lines if x["event"] == "start"):
                return
            assert time.monotonic() < deadline, "no handler is running"
            time.sleep(0.01)

    def wait_output(self, pattern: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.current.log.read_text(errors="replace")):
            assert time.monotonic() < deadline, f"{pattern!r} not logged in {timeout}s"
            time.sleep(0.1)

    # ---------------------------------------------------------------------- liveness

    def _poll_liveness(self) -> None:
        while not self._polling.is_set():
            code: int | None
            conn = http.client.HTTPConnection("127.0.0.1", self.liveness_port, timeout=2)
            try:
                conn.request("GET", "/healthz")
                code = conn.getresponse().status
            except (OSError, http.client.HTTPException):
                code = None
            finally:
                conn.close()
            self.liveness.append((time.monotonic(), code))
            self._polling.wait(0.5)

    def liveness_between(self, start: float, end: float) -> list[int | None]:
        return [code for at, code in self.liveness if start <= at <= end]

    def wait_liveness(self, code: int, timeout: float = 90) -> float:
        """Wait until the endpoint answers ``code``; return when it did."""
        deadline = time.monotonic() + timeout
        seen = len(self.liveness)
        while time.monotonic() < deadline:
            for at, got in self.liveness[seen:]:
                if got == code:
                    return at
            time.sleep(0.2)
        raise AssertionError(f"liveness never answered {code} in {timeout}s: {self.liveness[-10:]}")

    # ------------------------------------------------------------------------- objects

    def path(self, name: str | None = None) -> str:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        return f"{base}/{name}" if name else base

    def create(self, name: str, value: int, **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ChaosObject",
            "metadata": {"name": name},
            "spec": {"value": value, **spec},
        }
        status, _ = self.plane.request("POST", self.path(), body)
        assert status in (201, 409), status
        self.expected[name] = value

    def update(self, name: str, value: int) -> None:
        status, _ = self.plane.request(
            "PATCH",
            self.path(name),
            {"spec": {"value": value}},
            content_type="application/merge-patch+json",
        )
        assert status == 200, status
        self.expected[name] = value

    def delete(self, name: str) -> None:
        # The deletion handler is owed only if the operator had put its finalizer on by then:
        # an object deleted before the operator saw it is gone at once (as in Kopf).
        status, obj = self.plane.request("GET", self.path(name), ok=(200,))
        if status == 200 and FINALIZER in (obj["metadata"].get("finalizers") or []):
            self.owed_deletions.add(name)
        status, _ = self.plane.request("DELETE", self.path(name))
        assert status in (200, 202, 404), status
        self.expected[name] = None

    def burst(
        self, count: int, *, prefix: str = "obj", during: Callable[[int], None] | None = None
    ) -> None:
        """Create ``count`` objects, update each other one, delete each fifth; ``during(i)`` is
        called before the i-th step, to inject a fault mid-burst."""
        names = [f"{prefix}-{index:03d}" for index in range(count)]
        steps: list[Callable[[], None]] = []
        for index, name in enumerate(names):
            steps.append(lambda name=name, index=index: self.create(name, index * 10))
        for index, name in enumerate(names):
            if index % 2 == 1:
                steps.append(lambda name=name, index=index: self.update(name, index * 10 + 1))
        for index, name in enumerate(names):
            if index % 5 == 4:
                steps.append(lambda name=name: self.delete(name))
        for position, step in enumerate(steps):
            if during is not None:
                during(position)
            step()

    # -------------------------------------------------------------------- verification

    def records(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def unhandled(self, exclude: frozenset[str] = frozenset()) -> list[str]:
        """What is not (yet) handled: one line per object, empty when all is done."""
        done = {(r["handler"], r["name"]) for r in self.records() if r["event"] == "done"}
        _, listing = self.plane.request("GET", self.path(), ok=(200,))
        objects = {item["metadata"]["name"]: item for item in listing["items"]}
        problems = []
        for name, value in sorted(self.expected.items()):
            if name in exclude:
                continue
            obj = objects.get(name)
            if value is None:
                if obj is not None:
                    problems.append(f"{name}: deleted, but still there")
                elif name in self.owed_deletions and ("delete", name) not in done:
                    problems.append(f"{name}: gone without its deletion handler")
                continue
            if obj is None:
                problems.append(f"{name}: missing")
                continue
            annotations = obj["metadata"].get("annotations") or {}
            handled = json.loads(annotations[DIFFBASE])["spec"] if DIFFBASE in annotations else None
            results = obj.get("status") or {}
            values = {v.get("value") for v in results.values() if isinstance(v, dict)}
            if handled is None or handled.get("value") != value:
                problems.append(f"{name}: spec value {value} not handled (handled: {handled})")
            elif value not in values:
                problems.append(f"{name}: handled, but its result is missing ({results})")
        return problems

    def wait_handled(self, timeout: float = 120, exclude: frozenset[str] = frozenset()) -> float:
        """Wait until everything is handled; return the time it happened."""
        deadline = time.monotonic() + timeout
        while True:
            for run in self.runs:
                run.sample_rss()
            problems = self.unhandled(exclude)
            if not problems:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(problems)} object(s) not handled in {timeout}s:\n"
                    + "\n".join(problems[:20])
                    + f"\n--- operator output (tail):\n{self.output()[-4000:]}"
                )
            time.sleep(0.5)

    def stored_reruns(self) -> list[dict[str, Any]]:
        """Runs started by a later process although their result was stored at a kill."""
        pids = [run.pid for run in self.runs]
        reruns = []
        for line in self.records():
            if line["event"] != "start" or line["pid"] not in pids:
                continue
            started_in = pids.index(line["pid"])
            key = (line["handler"], line["name"], line["value"])
            if any(
                key in stored and pid in pids and pids.index(pid) < started_in
                for pid, stored in self.stored_at_kill.items()
            ):
                reruns.append(line)
        return reruns

    def duplicates(self) -> dict[str, int]:
        """Completed runs repeated, counted by cause; an unexplained repeat fails the case."""
        done: dict[tuple[str, str, Any], list[dict[str, Any]]] = collections.defaultdict(list)
        for line in self.records():
            if line["event"] == "done":
                done[line["handler"], line["name"], line["value"]].append(line)
        causes: collections.Counter[str] = collections.Counter()
        output = self.output()
        for (handler, name, value), runs in done.items():
            for earlier, later in itertools.pairwise(runs):
                restarted = earlier["pid"] != later["pid"]
                stored = self.stored_at_kill.get(earlier["pid"], set())
                if restarted and (handler, name, value) in stored:
                    causes[STORED_RERUN] += 1
                elif restarted and earlier["pid"] in self.killed:
                    causes["SIGKILL before the outcome was stored"] += 1
                elif restarted and earlier["pid"] in self.terminated:
                    causes["SIGTERM before the outcome was stored"] += 1
                elif re.search(
                    rf"\[{self.namespace}/{name}\].*(Throttling for|Unexpected error)", output
                ):
                    causes["a write of the outcome failed"] += 1
                else:
                    causes[f"UNEXPLAINED: {handler} {name} {value}"] += 1
        return dict(causes)

    def peak_rss_mb(self) -> float:
        return max((run.peak_rss_kb for run in self.runs), default=0) / 1024

    def finish(
        self,
        fault: str,
        *,
        recovered_in: float | None,
        expect_lost: int = 0,
        expect_errors: bool = False,
    ) -> None:
        """Stop the operator cleanly, check the counts, and record the case's row."""
        for run in self.runs:
            run.sample_rss()
        code = self.stop()
        self._polling.set()
        duplicates = self.duplicates()
        # Started again (even if not finished) after a kill that found their results stored.
        stored_reruns = self.stored_reruns()
        if self.killed:
            duplicates.setdefault(STORED_RERUN, 0)
            duplicates[STORED_RERUN] = max(duplicates[STORED_RERUN], len(stored_reruns))
        lost = len(self.unhandled())
        objects = len(self.expected)
        causes = ", ".join(f"{count} {cause}" for cause, count in sorted(duplicates.items())) or "0"
        recovery = f"{recovered_in:.1f} s" if recovered_in is not None else "n/a"
        with RESULTS.open("a") as out:
            out.write(
                f"| {self.title or self.name} | {fault} | {objects} | {lost - expect_lost}"
                f" | {causes} | {recovery} | {self.peak_rss_mb():.0f} MiB |\n"
            )
        assert code == 0, f"exit code {code}:\n{self.output()[-3000:]}"
        if not expect_errors:  # errors are logged with their tracebacks
            assert "Traceback" not in self.output(), self.output()[-6000:]
        assert lost == expect_lost, self.unhandled()
        assert not [cause for cause in duplicates if cause.startswith("UNEXPLAINED")], duplicates
        assert not stored_reruns, f"re-runs of stored results: {stored_reruns}"


@pytest.fixture
def case(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Case]:
    name = request.node.name.removeprefix("test_").replace("_", "-")[:30].rstrip("-")
    # Not tmp_path: the logs and records of a case are kept with the control plane's state.
    workdir = STATE / "cases" / f"{name}-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    chaos = Case(control_plane, name, workdir)
    chaos.title = request.node.name.removeprefix("test_").replace("_", " ")
    try:
        yield chaos
    finally:
        chaos._polling.set()
        for run in chaos.runs:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait(10)
        # The API server and etcd may have been killed by the case: bring them back.
        control_plane.up()


@pytest.fixture
def proxy(control_plane: ControlPlane, case: Case) -> Iterator[Proxy]:
    chaos_proxy = Proxy(control_plane.port, control_plane.cafile, Policy())
    port = chaos_proxy.start()
    case.kubeconfig = control_plane.kubeconfig_via(port, case.workdir / "kubeconfig-proxy")
    try:
        yield chaos_proxy
    finally:
        chaos_proxy.stop()
