"""``trioperator new NAME``: the project it writes, and what it refuses.

Writing a project runs ``trioperator crd``/``rbac`` in child processes (a few seconds each), so
the two projects are written once per module; the refusals happen before any of that. The
generated project's own tests, its installation and its image are checked by
``scripts/scaffold-test`` (``./dev scaffold-test``, in CI).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from trioperator.cli import CLIControls, main

EXPECTED_FILES = {
    ".gitignore",
    "Containerfile",
    "Justfile",
    "README.md",
    "pyproject.toml",
    "wheels/README",
    "manifests/crd.yaml",
    "manifests/deployment.yaml",
    "manifests/example.yaml",
    "manifests/kustomization.yaml",
    "manifests/namespace.yaml",
    "manifests/rbac.yaml",
    "manifests/serviceaccount.yaml",
    "tests/conftest.py",
    "tests/test_operator.py",
    "tests/test_real_cluster.py",
}


def _new(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["new", *argv], controls=CLIControls(handle_signals=False))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _files(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def typed_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("typed")
    code = main(["new", "my-app", "--dir", str(parent)], controls=CLIControls(handle_signals=False))
    assert code == 0
    return parent / "my-app"


@pytest.fixture(scope="module")
def yaml_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("yaml")
    argv = ["new", "gadgets", "--yaml", "--kind", "Gadget", "--group", "example.org"]
    code = main([*argv, "--dir", str(parent)], controls=CLIControls(handle_signals=False))
    assert code == 0
    return parent / "gadgets"


def test_a_typed_project_has_every_file_and_a_crd_generated_from_its_models(
    typed_project: Path,
) -> None:
    assert _files(typed_project) == EXPECTED_FILES | {"my_app/__init__.py", "my_app/operator.py"}
    (crd,) = _documents(typed_project / "manifests" / "crd.yaml")
    assert crd["metadata"]["name"] == "myapps.my-app.example.com"
    assert crd["spec"]["names"]["kind"] == "MyApp"
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["replicas"] == {
        "type": "integer",
        "description": "How many copies.",
        "default": 1,
        "minimum": 0,
        "maximum": 10,
    }
    assert version["subresources"] == {"status": {}}
    header = (typed_project / "manifests" / "crd.yaml").read_text().splitlines()[0]
    assert "trioperator crd -m my_app.operator" in header


def test_the_rbac_manifests_are_what_trioperator_rbac_grants_the_handlers(
    typed_project: Path,
) -> None:
    role, binding = _documents(typed_project / "manifests" / "rbac.yaml")
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == "my-app"
    rules = {(rule["apiGroups"][0], res): rule["verbs"] for rule in role["rules"]
             for res in rule["resources"]}  # fmt: skip
    assert rules[("my-app.example.com", "myapps")] == ["list", "watch", "patch"]
    assert rules[("my-app.example.com", "myapps/status")] == ["patch"]
    assert not any(res.startswith("kopfpeerings") or "peering" in res for _, res in rules)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "my-app", "namespace": "my-app"}
    ]
    (account,) = _documents(typed_project / "manifests" / "serviceaccount.yaml")
    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == ("my-app", "my-app")


def test_the_deployment_runs_the_package_with_the_service_account(typed_project: Path) -> None:
    (deployment,) = _documents(typed_project / "manifests" / "deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "my-app"
    (container,) = pod["containers"]
    assert container["image"] == "localhost/my-app:latest"
    assert container["args"][:5] == ["run", "--standalone", "--all-namespaces", "-m",
                                     "my_app.operator"]  # fmt: skip
    kustomization = yaml.safe_load((typed_project / "manifests" / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in (typed_project / "manifests").iterdir()} - {"kustomization.yaml"}
    assert listed == on_disk - {"example.yaml"}


def test_the_pyproject_names_the_package_and_depends_on_trioperator(typed_project: Path) -> None:
    project = tomllib.loads((typed_project / "pyproject.toml").read_text())
    assert project["project"]["name"] == "my-app"
    assert any(dep.startswith("trioperator") for dep in project["project"]["dependencies"])
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["my_app"]
    assert "real_cluster" in project["tool"]["pytest"]["ini_options"]["markers"][0]
    containerfile = (typed_project / "Containerfile").read_text()
    assert "COPY my_app /src/my_app" in containerfile
    assert '"-m", "my_app.operator"]' in containerfile
    assert "%%" not in "".join(p.read_text() for p in typed_project.rglob("*") if p.is_file())


def test_a_yaml_project_has_its_crd_as_yaml_and_dict_handlers(yaml_project: Path) -> None:
    assert _files(yaml_project) == EXPECTED_FILES | {"gadgets/__init__.py", "gadgets/operator.py"}
    (crd,) = _documents(yaml_project / "manifests" / "crd.yaml")
    assert crd["metadata"]["name"] == "gadgets.example.org"
    assert crd["spec"]["names"] == {
        "kind": "Gadget",
        "plural": "gadgets",
        "singular": "gadget",
        "listKind": "GadgetList",
    }
    operator = (yaml_project / "gadgets" / "operator.py").read_text()
    assert 'GROUP = "example.org"' in operator
    assert "msgspec" not in operator
    assert "crd:" not in (yaml_project / "Justfile").read_text()  # nothing to generate it from
    role, _ = _documents(yaml_project / "manifests" / "rbac.yaml")
    assert any(rule["resources"] == ["gadgets"] for rule in role["rules"])


def test_the_generated_tests_pass_as_generated(yaml_project: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=yaml_project,
        env={"PATH": "/usr/bin:/bin"},  # no KUBEBUILDER_ASSETS: the real-cluster tier is opt-in
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "1 passed, 1 deselected" in result.stdout


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["My_App"], "Invalid project name 'My_App'"),
        (["1app"], "Invalid project name '1app'"),
        (["app-"], "Invalid project name 'app-'"),
        (["a" * 51], "at most 50 characters"),
        (["json"], "would shadow a module"),
        (["tests"], "would shadow a module"),
        (["trioperator"], "would shadow a module"),
        (["ok", "--kind", "lowercase"], "Invalid --kind 'lowercase'"),
        (["ok", "--group", "nodot"], "Invalid --group 'nodot'"),
    ],
)
def test_invalid_names_are_refused_and_nothing_is_written(
    argv: list[str], complaint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _new([*argv, "--dir", str(tmp_path)], capsys)
    assert code == 2
    assert complaint in err
    assert list(tmp_path.iterdir()) == []


def test_existing_files_are_refused_without_force_and_overwritten_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "widgets"
    (project / "manifests").mkdir(parents=True)
    (project / "manifests" / "rbac.yaml").write_text("# mine\n")
    (project / "notes.txt").write_text("keep me\n")

    code, _, err = _new(["widgets", "--dir", str(tmp_path)], capsys)
    assert code == 2
    assert "already has 1 of the project's files (manifests/rbac.yaml)" in err
    assert "--force" in err
    assert _files(project) == {"manifests/rbac.yaml", "notes.txt"}
    assert (project / "manifests" / "rbac.yaml").read_text() == "# mine\n"

    code, out, err = _new(["widgets", "--dir", str(tmp_path), "--force"], capsys)
    assert (code, err) == (0, "")
    assert f"Created the project widgets in {project}" in out
    assert (project / "manifests" / "rbac.yaml").read_text().startswith("# Generated by")
    assert (project / "notes.txt").read_text() == "keep me\n"  # not one of the project's files


def test_a_file_where_the_project_directory_would_be_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "widgets").write_text("")
    code, _, err = _new(["widgets", "--dir", str(tmp_path)], capsys)
    assert code == 2
    assert "exists and is not a directory" in err


def test_trioperator_force_in_the_environment_does_not_force_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only `run` reads its options from the environment (docs/reference/environment.md): a
    # TRIOPERATOR_FORCE left in the shell must not make `new` overwrite a user's files.
    monkeypatch.setenv("TRIOPERATOR_FORCE", "true")
    project = tmp_path / "widgets"
    project.mkdir()
    (project / "README.md").write_text("# mine\n")

    code, _, err = _new(["widgets", "--dir", str(tmp_path)], capsys)
    assert code == 2
    assert "already has 1 of the project's files (README.md)" in err
    assert (project / "README.md").read_text() == "# mine\n"
