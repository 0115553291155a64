"""Finding, starting and reporting the real control plane's servers, with stand-in binaries.

The servers themselves run in the e2e tier (tests/e2e/test_real_control_plane.py and
examples/09-testing/test_real_control_plane.py); here, small shell scripts take their place
to show what a user sees when the binaries are missing or a server fails to start.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from trioperator.testing import ControlPlaneBinaries, ControlPlaneError, RealControlPlane
from trioperator.testing.controlplane import (
    apiserver_command,
    etcd_command,
    free_ports,
    load_crds,
    main,
    prepare_state,
)


def script(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


APISERVER_1_30 = 'case "$1" in --version) echo "Kubernetes v1.30.2";; *) exec sleep 60;; esac'


def test_binaries_come_from_kubebuilder_assets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("etcd", "kube-apiserver", "kubectl"):
        script(tmp_path, name, "exit 0")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert ControlPlaneBinaries.find() == ControlPlaneBinaries(
        etcd=tmp_path / "etcd",
        kube_apiserver=tmp_path / "kube-apiserver",
        kubectl=tmp_path / "kubectl",
    )


def test_without_assets_the_builders_cache_is_used_and_etcd_comes_from_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(tmp_path / "cache" / "bin", "kube-apiserver", "exit 0")
    etcd = script(tmp_path / "path", "etcd", "exit 0")
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("TRIOPERATOR_KUBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    found = ControlPlaneBinaries.find()
    assert found.kube_apiserver == tmp_path / "cache" / "bin" / "kube-apiserver"
    assert found.etcd == etcd
    assert found.kubectl is None


def test_missing_binaries_are_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(ControlPlaneError, match=r"No executable kube-apiserver in .*KUBEBUILDER"):
        ControlPlaneBinaries.find()
    script(tmp_path, "kube-apiserver", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ControlPlaneError, match=r"No etcd in"):
        ControlPlaneBinaries.find()


def test_the_watch_gate_only_for_the_servers_that_need_it(tmp_path: Path) -> None:
    gate = "--feature-gates=EfficientWatchResumption=true"
    old = apiserver_command("kube-apiserver", tmp_path, 1234, 5678, version=(1, 20))
    new = apiserver_command(
        "kube-apiserver", tmp_path, 1234, 5678, version=(1, 30), extra_args=["--v=2"]
    )
    assert gate in old
    assert gate not in new
    assert new[-1] == "--v=2"
    assert "--secure-port=1234" in new
    assert "--etcd-servers=http://127.0.0.1:5678" in new


def test_the_state_is_made_once_and_the_kubeconfig_follows_the_port(tmp_path: Path) -> None:
    token = prepare_state(tmp_path, 1111)
    certificate = (tmp_path / "tls.crt").read_bytes()
    assert prepare_state(tmp_path, 2222) == token
    assert (tmp_path / "tls.crt").read_bytes() == certificate
    kubeconfig = (tmp_path / "kubeconfig").read_text()
    assert "server: https://127.0.0.1:2222" in kubeconfig
    assert f"token: {token}" in kubeconfig
    assert (tmp_path / "tokens.csv").read_text() == f"{token},admin,admin,system:masters\n"
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_the_script_interface_prints_one_argument_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["etcd-command", "/bin/etcd", str(tmp_path), "3000", "3001"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == etcd_command("/bin/etcd", tmp_path, 3000, 3001)
    assert main(["nonsense"]) == 2


def test_free_ports_are_distinct() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3


def test_crd_files_hold_only_crds(tmp_path: Path) -> None:
    path = tmp_path / "crds.yaml"
    path.write_text("kind: CustomResourceDefinition\nmetadata: {name: a.b}\n---\nkind: Pod\n")
    with pytest.raises(ValueError, match="only CustomResourceDefinitions"):
        load_crds(path)


def test_a_server_that_exits_at_startup_is_reported_with_its_log(tmp_path: Path) -> None:
    script(tmp_path / "bin", "etcd", 'echo "etcd: unknown flag --nonsense" >&2; exit 3')
    script(tmp_path / "bin", "kube-apiserver", APISERVER_1_30)
    plane = RealControlPlane(assets=tmp_path / "bin", start_timeout=30)
    with pytest.raises(ControlPlaneError, match=r"(?s)etcd exited with code 3.*unknown flag"):
        plane.start()
    with pytest.raises(ControlPlaneError, match="no state"):
        _ = plane.state_dir  # the temporary state is gone with the failed start


def test_a_server_that_never_gets_ready_is_stopped_after_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "etcd.pid"
    script(tmp_path / "bin", "etcd", f'echo $$ > "{pid_file}"; exec sleep 60')
    script(tmp_path / "bin", "kube-apiserver", APISERVER_1_30)
    plane = RealControlPlane(assets=tmp_path / "bin", start_timeout=0.5, stop_timeout=5)
    with pytest.raises(ControlPlaneError, match=r"etcd is not ready after 0.5s"):
        plane.start()
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped (and reaped) by the failed start
