"""The demo: a real local kube-apiserver, an example operator, and one object's life.

Run it with ``./dev demo`` (or ``just demo``). It starts the local control plane if needed
(``scripts/kube-up``), applies the example CRD, runs ``examples/05-handlers`` with the
``trioperator`` CLI, then creates, changes and deletes an object while showing what the
handlers did. Everything it started is stopped at the end (the control plane only if the
demo started it).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE_BASE = "trioperator-demo"
OPERATOR = ROOT / "examples" / "05-handlers" / "example.py"


def step(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def kube_state_dir() -> Path:
    default = Path(os.environ.get("TMPDIR", "/tmp")) / f"trioperator-kube.{os.getuid()}"
    return Path(os.environ.get("TRIOPERATOR_KUBE_DIR", default))


def apiserver_running() -> bool:
    pidfile = kube_state_dir() / "kube-apiserver.pid"
    try:
        pid = int(pidfile.read_text().strip())
        return str(kube_state_dir()) in Path(f"/proc/{pid}/cmdline").read_text()
    except (OSError, ValueError):
        return False


class Operator:
    def __init__(self, env: dict[str, str], namespace: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trioperator",
                "run",
                "--verbose",
                "--log-format=plain",
                "-n",
                namespace,
                str(OPERATOR),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            # Show the handlers' own output and the framework's key lines, not every debug line.
            if not re.search(r"is in progress|Patching|diff:|HTTP Request", line):
                print(f"    operator | {line[:160]}", flush=True)

    def wait_for(self, pattern: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(re.search(pattern, line) for line in self.lines):
                return
            if self.process.poll() is not None:
                raise SystemExit(f"The operator exited early with code {self.process.returncode}.")
            time.sleep(0.1)
        raise SystemExit(f"Timed out waiting for {pattern!r} in the operator's log.")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.reader.join(5)
        return self.process.wait()


def main() -> int:
    started_cluster = not apiserver_running()
    step("Starting the local kube-apiserver (scripts/kube-up; the first run builds it)")
    kubeconfig = (
        subprocess.run(
            [str(ROOT / "scripts" / "kube-up")], check=True, stdout=subprocess.PIPE, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    env = {**os.environ, "KUBECONFIG": kubeconfig, "PYTHONUNBUFFERED": "1"}
    kubectl_path = shutil.which("kubectl") or str(
        Path.home() / ".cache/trioperator/kube/bin/kubectl"
    )

    def kubectl(*args: str, quiet: bool = False) -> str:
        result = subprocess.run([kubectl_path, *args], env=env, capture_output=True, text=True)
        if result.returncode != 0 and not quiet:
            raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def show_object() -> None:
        obj = json.loads(
            kubectl("get", "kopfexample", "kopf-example-1", "-n", namespace, "-o", "json")
        )
        meta = obj["metadata"]
        shown = {
            "spec": obj.get("spec"),
            "status": obj.get("status"),
            "finalizers": meta.get("finalizers"),
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if not k.startswith("kubectl.kubernetes.io/")
            },
        }
        for line in json.dumps(shown, indent=2).splitlines():
            print(f"    object   | {line}")

    namespace = NAMESPACE_BASE
    operator: Operator | None = None
    try:
        step("Applying the example CRD (examples/crd.yaml) and a namespace for the demo")
        kubectl("apply", "-f", str(ROOT / "examples" / "crd.yaml"))
        kubectl("wait", "--for=condition=Established", "crd/kopfexamples.kopf.dev", "--timeout=30s")
        # Without kube-controller-manager a deleted namespace stays Terminating for ever, so the
        # demo keeps its namespace, and picks another one if an older one is stuck terminating.
        namespace = NAMESPACE_BASE
        for index in range(1, 100):
            jsonpath = "jsonpath={.status.phase}"
            phase = kubectl("get", "namespace", namespace, "-o", jsonpath, quiet=True).strip()
            if phase in ("", "Active"):
                break
            namespace = f"{NAMESPACE_BASE}-{index}"
        kubectl("create", "namespace", namespace, quiet=True)
        kubectl(
            "delete",
            "kopfexample",
            "kopf-example-1",
            "-n",
            namespace,
            "--ignore-not-found",
            "--wait=false",
        )

        step(f"Running the operator: trioperator run -n {namespace} {OPERATOR.relative_to(ROOT)}")
        operator = Operator(env, namespace)
        operator.wait_for("The operator is ready")

        step("Creating the object (examples/obj.yaml)")
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "obj.yaml"))
        operator.wait_for(r"Creation is processed")
        time.sleep(1)
        show_object()

        step("Changing spec.field of the object")
        kubectl(
            "patch",
            "kopfexample",
            "kopf-example-1",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec": {"field": "changed"}}',
        )
        operator.wait_for(r"Updating is processed")
        time.sleep(1)
        show_object()

        step("Deleting the object (the finalizer holds it until the delete handlers are done)")
        kubectl("delete", "kopfexample", "kopf-example-1", "-n", namespace, "--wait=false")
        operator.wait_for(r"Deleted, really deleted")
        remaining = kubectl("get", "kopfexamples", "-n", namespace, "-o", "name")
        print(f"    object   | gone: {not remaining.strip()}")

        step("Stopping the operator gracefully (SIGINT)")
        code = operator.stop()
        operator = None
        print(f"    operator exited with code {code}")
        return code
    finally:
        if operator is not None:
            operator.stop()
        if started_cluster:
            step("Stopping the local kube-apiserver the demo started (scripts/kube-down)")
            subprocess.run([str(ROOT / "scripts" / "kube-down")], check=False)


if __name__ == "__main__":
    sys.exit(main())
