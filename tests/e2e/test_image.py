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


def test_the_image_serves_an_object_as_pid_1_and_stops_on_sigterm(
    image_archive: Path,
    tmp_path: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    example_crd: None,
    namespace: str,
) -> None:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    config = unpack(image_archive, rootfs)
    assert config["User"] == "10001:10001"  # non-root, numeric: runAsNonRoot can check it
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["TRIOPERATOR_LOG_FORMAT"] == "json"

    # The user's operator, as a layer would add it (or a volume mount); runtimes create a
    # missing working directory.
    (rootfs / config["WorkingDir"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "01-minimal" / "example.py", rootfs / "operator" / "operator.py")
    shutil.copy(kubeconfig, rootfs / "operator" / "kubeconfig")
    os.chmod(rootfs / "operator" / "kubeconfig", 0o644)
    env |= {"KUBECONFIG": "/operator/kubeconfig", "TRIOPERATOR_NAMESPACE": namespace}
    env["TRIOPERATOR_STANDALONE"] = "true"

    uid, gid = config["User"].split(":")
    command = [
        "unshare", "--pid", "--fork", "--mount", "--kill-child",
        f"--root={rootfs}", f"--wd={config['WorkingDir']}",
        "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        *config["Entrypoint"], *config["Cmd"],
    ]  # fmt: skip
    # The object exists before the start: the time to handle it is the start-up time.
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    started = time.monotonic()
    process = OperatorProcess(command, {**env})
    try:
        # The unshare process's only child is the entrypoint: PID 1 in its namespace.
        pid1 = _child_of(process.process.pid)
        with open(f"/proc/{pid1}/status") as status:
            assert any(line.split()[-1] == "1" for line in status if line.startswith("NSpid:"))
        process.wait_for(r"Handler 'create_fn' succeeded", timeout=60)
        handled_after = time.monotonic() - started
        created = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
        assert created["status"]["create_fn"] == {"message": "hello world"}

        # PID 1 gets a signal only if it has a handler for it: trioperator installs its own.
        os.kill(pid1, signal.SIGTERM)
        assert process.process.wait(30) == 0
    finally:
        process.stop()

    records = [json.loads(line) for line in process.lines if line.startswith("{")]
    assert len(records) == len([line for line in process.lines if line.strip()])  # JSON only
    messages = [record["message"] for record in records]
    assert any("SIGTERM received: stopping gracefully" in message for message in messages)
    print(f"\nimage: first object handled {handled_after:.1f} s after the start")


def _child_of(pid: int, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError(f"unshare (pid {pid}) started nothing in {timeout}s")
