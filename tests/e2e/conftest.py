"""The end-to-end tier: the CLI and the examples against a real kube-apiserver.

Every test here is marked ``e2e`` and gets its own namespace. Operators run as real
subprocesses (``python -m trioperator run ...``), exactly as a user runs them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)


@contextmanager
def private_control_plane(state_dir: Path, port: str, timeout: float, **env: str) -> Iterator[Path]:
    """A control plane of a test module's own (``scripts/kube-up`` on its own state directory and
    port, ``env`` its options such as ``TRIOPERATOR_KUBE_AUTHZ``); its kubeconfig. Purged after."""
    full_env = {
        **os.environ,
        "TRIOPERATOR_KUBE_DIR": str(state_dir),
        "TRIOPERATOR_KUBE_PORT": port,
        **env,
    }
    result = subprocess.run(
        [str(ROOT / "scripts" / "kube-up")],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        assert result.returncode == 0, result.stderr[-4000:]
        yield Path(result.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(
            [str(ROOT / "scripts" / "kube-down"), "--purge"],
            env=full_env,
            capture_output=True,
            timeout=120,
            check=False,
        )


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        found = shutil.which("kubectl") or str(Path.home() / ".cache/trioperator/kube/bin/kubectl")
        self.binary = found
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [self.binary, *args],
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self("get", "-o", "json", *args))


class OperatorProcess:
    """A ``trioperator run`` (or any operator command) subprocess with its output collected."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            args,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.output))

    def wait_for(self, pattern: str, *, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(pattern) >= count:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(
            f"{pattern!r} was not seen {count} time(s) in {timeout}s; "
            f"output:\n{self.output[-6000:]}"
        )

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


@pytest.fixture(scope="session")
def kubeconfig(real_kubeconfig: Path) -> Path:
    return real_kubeconfig


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    return Kubectl(kubeconfig)


@pytest.fixture(scope="session")
def example_crd(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(EXAMPLES / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/kopfexamples.kopf.dev", "--timeout=30s")


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    # Objects may carry finalizers of an operator that is gone: drop them so deletion completes,
    # all in one kubectl call (one per object took minutes after the sharding tests).
    held = [
        {
            "apiVersion": item["apiVersion"],
            "kind": item["kind"],
            "metadata": {"name": item["metadata"]["name"], "namespace": name},
        }
        for item in kubectl.get("kopfexamples", "-n", name).get("items", [])
        if item["metadata"].get("finalizers")
    ]
    if held:
        kubectl(
            "patch",
            "-f",
            "-",
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": held}),
            check=False,
        )
    kubectl("delete", "kopfexamples", "--all", "-n", name, "--wait=false", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def run_operator(kubeconfig: Path) -> Iterator[Any]:
    started: list[OperatorProcess] = []

    def start(*args: str, command: list[str] | None = None) -> OperatorProcess:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        base = command or [sys.executable, "-m", "trioperator", "run", "--verbose"]
        process = OperatorProcess([*base, *args], env)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture(scope="session")
def kopf_bin() -> str:
    """Kopf's CLI from its own venv (``scripts/kopf-venv``, made on the first use)."""
    result = subprocess.run(
        [str(ROOT / "scripts" / "kopf-venv")],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    python = Path(result.stdout.strip().splitlines()[-1])
    return str(python.parent / "kopf")


def framework_operator_file(
    tmp_path: Path, source: str, framework: str, stem: str = "operator"
) -> str:
    """Write ``source`` for Kopf (``import kopf``) or for us (``import trioperator as kopf``).

    ``source`` is formatted with ``{import_line}`` and ``{framework}``.
    """
    import_line = "import kopf" if framework == "kopf" else "import trioperator as kopf"
    path = tmp_path / f"{stem}_{framework}.py"
    path.write_text(source.format(import_line=import_line, framework=framework))
    return str(path)


def start_trioperator(run_operator: Any, *args: str) -> OperatorProcess:
    """``trioperator run --verbose ARGS``, once it is ready."""
    process: OperatorProcess = run_operator(*args)
    process.wait_for("The operator is ready")
    return process


def start_kopf(run_operator: Any, kopf_bin: str, *args: str) -> OperatorProcess:
    """``kopf run --verbose ARGS``, once it watches the example objects."""
    process: OperatorProcess = run_operator("--verbose", *args, command=[kopf_bin, "run"])
    process.wait_for("Starting the watch-stream for kopfexamples")
    return process
