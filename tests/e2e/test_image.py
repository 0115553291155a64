"""The container image: its entrypoint, run as PID 1, serves an object and stops on SIGTERM.

The image is the OCI archive ``scripts/build-image`` writes (``just image``). No container
runtime works in this sandbox (crun may not set rlimits), so the archive's layers are unpacked
into a root filesystem and its entrypoint runs there the way a runtime would start it: in new
PID and mount namespaces (``unshare``; the entrypoint is PID 1, which has no default signal
handling), chrooted, as the image's user, with the image's environment and working directory,
on the host network (the local kube-apiserver listens on loopback).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import EXAMPLES, ROOT, Kubectl, OperatorProcess

ARCHIVE = ROOT / "dist" / "trioperator-image.oci.tar"


@pytest.fixture(scope="module")
def image_archive() -> Path:
    configured = os.environ.get("TRIOPERATOR_IMAGE_ARCHIVE")
    if configured:
        return Path(configured)
    if not (shutil.which("buildah") and shutil.which("mmdebstrap") and shutil.which("unshare")):
        pytest.skip(
            "the image tools (buildah, mmdebstrap) are not installed: "
            "`just image-test` installs them and runs this test"
        )
    # Cached root filesystems and layers: seconds when nothing changed.
    result = subprocess.run(
        [str(ROOT / "scripts" / "build-image"), str(ARCHIVE)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return ARCHIVE


def _blob(oci: tarfile.TarFile, digest: str) -> bytes:
    algorithm, _, value = digest.partition(":")
    member = oci.extractfile(f"blobs/{algorithm}/{value}")
    assert member is not None
    return member.read()


def unpack(archive: Path, rootfs: Path) -> dict[str, Any]:
    """Apply the image's layers in order into ``rootfs``; return the image's config."""
    with tarfile.open(archive) as oci:
        index = json.loads(_blob_file(oci, "index.json"))
        manifest = json.loads(_blob(oci, index["manifests"][0]["digest"]))
        config = json.loads(_blob(oci, manifest["config"]["digest"]))
        for layer in manifest["layers"]:
            data = _blob(oci, layer["digest"])
            if layer["mediaType"].endswith("gzip"):
                data = gzip.decompress(data)
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                for member in tar.getmembers():
                    name = Path(member.name)
                    if name.name.startswith(".wh."):  # a whiteout: the lower file is deleted
                        target = rootfs / name.parent / name.name.removeprefix(".wh.")
                        if target.is_dir() and not target.is_symlink():
                            shutil.rmtree(target)
                        else:
                            target.unlink(missing_ok=True)
                        continue
                    tar.extract(member, rootfs, filter="fully_trusted")
    return dict(config["config"])


def _blob_file(oci: tarfile.TarFile, name: str) -> bytes:
    member = oci.extractfile(name)
    assert member is not None
    return member.read()


@pytest.fixture(scope="module")
def image(image_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The image's root filesystem, unpacked once, and its config."""
    rootfs = tmp_path_factory.mktemp("image") / "rootfs"
    rootfs.mkdir()
    config = unpack(image_archive, rootfs)
    assert (rootfs / config["WorkingDir"].lstrip("/")).is_dir()
    return rootfs, config


class Container:
    """The image's entrypoint with its default command, run as a runtime would run it."""

    def __init__(self, image: tuple[Path, Any], operator: str, kubeconfig: Path, ns: str) -> None:
        rootfs, config = image
        # The user's operator where a layer would add it (or a volume mount).
        (rootfs / "operator" / "operator.py").write_text(operator)
        shutil.copy(kubeconfig, rootfs / "operator" / "kubeconfig")
        os.chmod(rootfs / "operator" / "kubeconfig", 0o644)
        env = dict(item.split("=", 1) for item in config["Env"])
        env |= {"KUBECONFIG": "/operator/kubeconfig", "TRIOPERATOR_NAMESPACE": ns}
        env["TRIOPERATOR_STANDALONE"] = "true"
        uid, gid = config["User"].split(":")
        command = [
            "unshare", "--pid", "--fork", "--mount", "--kill-child",
            f"--root={rootfs}", f"--wd={config['WorkingDir']}",
            "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            *config["Entrypoint"], *config["Cmd"],
        ]  # fmt: skip
        self.started = time.monotonic()
        self.process = OperatorProcess(command, env)
        # The unshare process's only child is the entrypoint: PID 1 in its namespace.
        self.pid1 = _child_of(self.process.process.pid)

    def messages(self) -> list[str]:
        lines = [line for line in self.process.lines if line.strip()]
        records = [json.loads(line) for line in lines if line.startswith("{")]
        assert len(records) == len(lines), "\n".join(lines)  # JSON lines only
        return [record["message"] for record in records]


def test_the_image_is_non_root_and_logs_json(image: tuple[Path, Any]) -> None:
    rootfs, config = image
    assert config["User"] == "10001:10001"  # numeric: runAsNonRoot can check it
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["TRIOPERATOR_LOG_FORMAT"] == "json"
    assert config["Entrypoint"] == ["/opt/trioperator/bin/trioperator"]
    # No build tools in the final stage: no pip, no compiler, no package manager.
    for tool in ("opt/trioperator/bin/pip", "usr/bin/gcc", "usr/bin/make", "usr/bin/apt-get"):
        assert not (rootfs / tool).exists(), tool
    assert not list((rootfs / "usr/lib").glob("python3*/ensurepip"))  # no way to get pip back


def test_the_image_can_keep_a_webhook_ca_for_its_replicas(image: tuple[Path, Any]) -> None:
    # The manifests' WebhookServiceServer makes (or loads) the CA in a Secret and issues its
    # serving certificate from it: the image has the `webhooks` extra for that.
    rootfs, config = image
    uid, gid = config["User"].split(":")
    script = (
        "from trioperator._kits.certificates import CertificateAuthority as CA; "
        "ca = CA.generate('webhooks-ca'); "
        "chain, key = ca.issue(['trioperator-webhooks.trioperator.svc']); "
        "print(chain.count(b'BEGIN CERTIFICATE'), ca.bundle == ca.cert_pem)"
    )
    command = [
        "unshare", "--mount", f"--root={rootfs}", "/usr/bin/setpriv", f"--reuid={uid}",
        f"--regid={gid}", "--clear-groups", "/opt/trioperator/bin/python", "-c", script,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "True"]


def test_the_image_serves_an_object_as_pid_1_and_stops_on_sigterm(
    image: tuple[Path, Any],
    kubeconfig: Path,
    kubectl: Kubectl,
    example_crd: None,
    namespace: str,
) -> None:
    # The object exists before the start: the time to handle it is the start-up time.
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator = (EXAMPLES / "01-minimal" / "example.py").read_text()
    container = Container(image, operator, kubeconfig, namespace)
    try:
        with open(f"/proc/{container.pid1}/status") as status:
            assert any(line.split()[-1] == "1" for line in status if line.startswith("NSpid:"))
        container.process.wait_for(r"Handler 'create_fn' succeeded", timeout=60)
        handled_after = time.monotonic() - container.started
        created = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
        assert created["status"]["create_fn"] == {"message": "hello world"}

        # PID 1 gets a signal only if it has a handler for it: trioperator installs its own.
        os.kill(container.pid1, signal.SIGTERM)
        assert container.process.process.wait(30) == 0
    finally:
        container.process.stop()
    assert "Signal SIGTERM is received. Operator is stopping." in container.messages()
    print(f"\nimage: first object handled {handled_after:.2f} s after the start")


SLOW = """
import trio
import trioperator as kopf

@kopf.on.create("kopfexamples")
async def slow_fn(logger, **_):
    logger.info("Slow handler started.")
    # A graceful stop waits for it; only cancelling ends it early. Its lines show it runs (the
    # image logs JSON lines only).
    for _ in range(3000):
        logger.info("Slow handler runs.")
        await trio.sleep(0.2)
"""


def test_a_second_sigterm_stops_pid_1_at_once(
    image: tuple[Path, Any],
    kubeconfig: Path,
    kubectl: Kubectl,
    example_crd: None,
    namespace: str,
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    container = Container(image, SLOW, kubeconfig, namespace)
    try:
        container.process.wait_for("Slow handler started", timeout=60)
        os.kill(container.pid1, signal.SIGTERM)
        container.process.wait_for("Operator is stopping")
        # The handler holds the graceful stop: it goes on (two more of its lines), and PID 1.
        runs = container.process.count("Slow handler runs")
        container.process.wait_for("Slow handler runs", count=runs + 2)
        assert container.process.process.poll() is None
        os.kill(container.pid1, signal.SIGTERM)
        container.process.process.wait(15)
    finally:
        container.process.stop()
    assert "Signal SIGTERM again: cancelling now." in container.messages()


def _child_of(pid: int, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError(f"unshare (pid {pid}) started nothing in {timeout}s")
