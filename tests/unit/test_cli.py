"""The command line: parsing, usage errors (exit code 2 before anything connects), loading."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trioperator._engine.registry import OperatorRegistry
from trioperator._runtime.program.operator import Operator
from trioperator.cli import CLIControls, UsageError, app, load, main


def _run(argv: list[str], registry: OperatorRegistry | None = None) -> tuple[int, CLIControls]:
    controls = CLIControls(registry=registry or OperatorRegistry(), handle_signals=False)
    return main(argv, controls=controls), controls


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "-n", "ns1", "-A", "x.py"], "Either --namespace or --all-namespaces"),
        (["run", "-L", "https://0.0.0.0:8080/healthz", "x.py"], "http://"),
        (["run"], "Nothing to run"),
        (["run", "/nonexistent/operator.py"], "No such file: /nonexistent/operator.py"),
        (["run", "-m", "no_such_module_here_at_all"], "No such module: no_such_module_here_at_all"),
        (["run", "--standalone", "-P", "mine", "x.py"], "Either --standalone or --peering"),
        (["run", "--peering", "", "x.py"], "--peering needs the name"),
        (["run", "--metrics", "https://0.0.0.0:9090/metrics", "x.py"], "http:// metrics"),
        (["run", "-L", "http://:80/m", "--metrics", "http://:80/m", "x.py"], "another path"),
        (["freeze", "-P", "p", "-t", "0"], "--lifetime must be a positive number"),
        (["freeze", "-P", "p", "-t", "60", "-n", "ns", "-A"], "Either --namespace or"),
        (["freeze", "-P", " ", "-t", "60"], "--peering needs the name"),
        (["freeze", "-P", "p", "-t", "60", "-i", ""], "--id needs a non-empty identity"),
        (["resume", "-P", "p", "-n", "ns", "-A"], "Either --namespace or --all-namespaces"),
        (["run", "--shard-ring", "r", "x.py"], "--shard-ring needs --shards auto"),
        (["run", "--shard-mode", "labels", "x.py"], "--shard-mode needs --shards auto"),
        (["run", "--shards", "auto", "--shard-ring", " ", "x.py"], "--shard-ring needs a name"),
        (["run", "--id", "", "x.py"], "--id needs a value"),
    ],
)
def test_usage_errors_exit_with_code_2_and_say_why(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, controls = _run(argv)
    assert code == 2
    assert isinstance(controls.exception, UsageError)
    assert message in capsys.readouterr().err


def test_unknown_options_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run(["run", "--no-such-option", "x.py"])
    assert code == 2
    captured = capsys.readouterr()
    assert "Unknown" in captured.out + captured.err


def test_a_file_without_handlers_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    file = tmp_path / "empty_operator.py"
    file.write_text("X = 1\n")
    code, _ = _run(["run", str(file)])
    assert code == 2
    assert "No handlers were registered" in capsys.readouterr().err


def test_a_syntax_error_in_the_operator_file_is_reported(tmp_path: Path, capsys: Any) -> None:
    file = tmp_path / "broken_operator.py"
    file.write_text("def oops(:\n")
    code, controls = _run(["run", str(file)])
    assert code != 0
    assert isinstance(controls.exception, SyntaxError)


def test_files_and_modules_register_their_handlers(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "op_file.py").write_text(
        "import trioperator as kopf\n@kopf.on.create('kopfexamples')\ndef from_file(**_): pass\n"
    )
    (tmp_path / "op_module_for_cli_test.py").write_text(
        "import trioperator as kopf\n@kopf.on.update('kopfexamples')\ndef from_module(**_): pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = OperatorRegistry()
    from trioperator._engine.registry import get_default_registry, set_default_registry

    previous = get_default_registry()
    set_default_registry(registry)
    try:
        load([str(tmp_path / "op_file.py")], ["op_module_for_cli_test"], registry=registry)
    finally:
        set_default_registry(previous)
    assert len(registry) == 2


def test_version_from_the_module_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trioperator", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    import trioperator

    assert result.returncode == 0
    assert result.stdout.strip() == trioperator.__version__


def test_the_version_is_written_by_the_install() -> None:
    """The (editable) install wrote the version from the git tags, a PEP 440 one; not the
    fallback of a tree that was never installed. (scripts/check-wheel checks that a wheel's
    `trioperator --version` is the wheel's own version.)"""
    import re

    import trioperator

    assert trioperator.__version__ != "0+unknown"
    pep440 = r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[\w.]+)?"
    assert re.fullmatch(pep440, trioperator.__version__)


def test_a_wheel_built_from_the_checkout_leaves_its_version_alone(tmp_path: Path) -> None:
    """Building a wheel writes the version into the wheel only: a checkout's processes keep
    saying the version of its install, whatever was built (and committed) since."""
    import zipfile

    import trioperator

    root = Path(trioperator.__file__).parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a checkout: nothing is built from it")
    # The sources as committed plus this tree's changes, with a commit of their own (a new
    # version), built as scripts/check-wheel and scripts/scaffold-test build them.
    copy = tmp_path / "src"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(root), str(copy)], check=True)
    for name in ("pyproject.toml", "hatch_build.py", "trioperator/_version.py"):
        if (root / name).exists():
            (copy / name).write_bytes((root / name).read_bytes())
    git = ["git", "-C", str(copy), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "a later commit", "--allow-empty"], check=True)
    subprocess.run(
        [sys.executable, "-m", "build", "-q", "--wheel", "--outdir", str(tmp_path / "dist"), "."],
        cwd=copy,
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert not (copy / "trioperator" / "_build_version.py").exists()
    (wheel,) = (tmp_path / "dist").glob("trioperator-*.whl")
    built = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as archive:
        module = archive.read("trioperator/_build_version.py").decode()
    assert f'__version__ = "{built}"' in module


def test_options_come_from_the_environment_too(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv("TRIOPERATOR_ALL_NAMESPACES", "true")
    code, _ = _run(["run", "-n", "ns1", "x.py"])
    assert code == 2
    assert "Either --namespace or --all-namespaces" in capsys.readouterr().err


class _Captured(Exception):
    """Raised from ``CLIControls.started``: the operator is built, and is not run."""


def _operator_from(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Operator:
    """The operator that ``trioperator run ... op.py`` would run (nothing connects)."""
    file = tmp_path / "op_for_peering_options.py"
    file.write_text(
        "import trioperator as kopf\n@kopf.on.create('kopfexamples')\ndef fn(**_): pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    built: list[Operator] = []

    def started(operator: Operator) -> None:
        built.append(operator)
        raise _Captured

    controls = CLIControls(registry=OperatorRegistry(), handle_signals=False, started=started)
    code = main([*argv[:1], str(file), *argv[1:]], controls=controls)
    assert isinstance(controls.exception, _Captured), controls.exception
    assert code == 1
    return built[0]


@pytest.mark.parametrize(
    ("argv", "name", "mandatory", "standalone", "priority", "clusterwide"),
    [
        (["run"], "default", False, False, 0, True),
        (["run", "-n", "ns1"], "default", False, False, 0, False),
        (["run", "-P", "mine"], "mine", True, False, 0, True),
        (["run", "--peering", "mine", "-n", "ns1"], "mine", True, False, 0, False),
        (["run", "-p", "100"], "default", False, False, 100, True),
        (["run", "--priority", "-5"], "default", False, False, -5, True),
        (["run", "--dev"], "default", False, False, 666, True),
        (["run", "--dev", "-p", "5"], "default", False, False, 666, True),  # as in Kopf
        (["run", "--standalone", "-A"], "default", False, True, 0, True),
    ],
)
def test_peering_options_reach_the_operator_settings(
    argv: list[str],
    name: str,
    mandatory: bool,
    standalone: bool,
    priority: int,
    clusterwide: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    peering = _operator_from(argv, tmp_path, monkeypatch).settings.peering
    assert (peering.name, peering.mandatory, peering.standalone) == (name, mandatory, standalone)
    assert (peering.priority, peering.clusterwide) == (priority, clusterwide)


def test_peering_options_come_from_the_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIOPERATOR_PEERING", "from-env")
    monkeypatch.setenv("TRIOPERATOR_PRIORITY", "42")
    peering = _operator_from(["run"], tmp_path, monkeypatch).settings.peering
    assert (peering.name, peering.mandatory, peering.priority) == ("from-env", True, 42)


def test_a_priority_that_is_not_a_number_is_a_usage_error(capsys: Any) -> None:
    code, _ = _run(["run", "-p", "high", "x.py"])
    assert code == 2
    captured = capsys.readouterr()
    assert "high" in captured.out + captured.err


@pytest.mark.parametrize(
    ("argv", "env", "flavor"),
    [
        (["run"], None, "auto"),
        (["run", "--async-flavor", "asyncio"], None, "asyncio"),
        (["run", "--async-flavor=trio"], None, "trio"),
        (["run"], "asyncio", "asyncio"),
        (["run", "--async-flavor", "trio"], "asyncio", "trio"),  # the command line wins
    ],
)
def test_the_async_flavor_reaches_the_settings(
    argv: list[str],
    env: str | None,
    flavor: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("TRIOPERATOR_ASYNC_FLAVOR", env)
    operator = _operator_from(argv, tmp_path, monkeypatch)
    assert operator.settings.execution.async_flavor == flavor


def test_an_unknown_async_flavor_is_a_usage_error(capsys: Any) -> None:
    code, _ = _run(["run", "--async-flavor", "curio", "x.py"])
    assert code == 2
    captured = capsys.readouterr()
    assert "curio" in captured.out + captured.err


@pytest.mark.parametrize(
    ("argv", "env", "endpoint"),
    [
        (["run"], None, None),
        (["run", "--metrics", "http://0.0.0.0:9090/metrics"], None, "http://0.0.0.0:9090/metrics"),
        (["run"], "http://0.0.0.0:9191/m", "http://0.0.0.0:9191/m"),
        (["run", "--metrics=http://0.0.0.0:1/x"], "http://0.0.0.0:9191/m", "http://0.0.0.0:1/x"),
    ],
)
def test_the_metrics_endpoint_reaches_the_operator(
    argv: list[str],
    env: str | None,
    endpoint: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("TRIOPERATOR_METRICS", env)
    assert _operator_from(argv, tmp_path, monkeypatch).metrics_endpoint == endpoint


@pytest.mark.parametrize(
    ("argv", "missing"),
    [
        (["freeze", "-t", "60"], "--peering"),
        (["freeze", "-P", "p"], "--lifetime"),
        (["freeze", "-P", "p", "-t", "soon"], "-t"),
        (["resume"], "--peering"),
    ],
)
def test_freeze_and_resume_need_their_options(
    argv: list[str], missing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _run(argv)
    assert code == 2
    captured = capsys.readouterr()
    assert missing in captured.out + captured.err


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("freeze", ["--peering", "-P", "--lifetime", "-t", "--namespace", "-n",
                    "--all-namespaces", "-A", "--id", "-i", "--priority", "-p", "--dev",
                    "--message", "-m"]),
        ("resume", ["--peering", "-P", "--namespace", "-n", "--all-namespaces", "-A",
                    "--id", "-i"]),
    ],
)  # fmt: skip
def test_freeze_and_resume_have_kopfs_options(
    command: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    main([command, "--help"])
    text = capsys.readouterr().out
    for option in options:
        assert f" {option} " in text or f" {option}\n" in text, option


def test_a_broken_kubeconfig_stops_a_freeze_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters: [oops\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, controls = _run(["freeze", "-P", "prod", "-t", "60"])
    assert code == 1
    assert controls.exception is None  # reported, not crashed
    assert "Cannot freeze:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "enabled", "ring", "identity"),
    [
        (["run", "--id", "pod-1"], False, "default", "pod-1"),
        (["run", "--shards", "auto"], True, "default", None),
        (["run", "--shards", "auto", "--shard-ring", "blue", "--id", "p2"], True, "blue", "p2"),
        (["run", "--shards", "off"], False, "default", None),
    ],
)
def test_sharding_options_reach_the_operator_settings(
    argv: list[str],
    enabled: bool,
    ring: str,
    identity: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    operator = _operator_from(argv, tmp_path, monkeypatch)
    assert (operator.settings.sharding.enabled, operator.settings.sharding.ring) == (enabled, ring)
    if identity is not None:
        assert operator.identity == identity


@pytest.mark.parametrize(("argv", "mode"), [
    (["run", "--shards", "auto"], "filter"),
    (["run", "--shards", "auto", "--shard-mode", "labels"], "labels"),
    (["run", "--shards", "auto", "--shard-mode", "filter"], "filter"),
])  # fmt: skip
def test_the_shard_mode_reaches_the_operator_settings(
    argv: list[str], mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator = _operator_from(argv, tmp_path, monkeypatch)
    assert operator.settings.sharding.mode == mode


def test_an_unknown_shards_mode_is_a_usage_error(capsys: Any) -> None:
    code, _ = _run(["run", "--shards", "3", "x.py"])
    assert code == 2
    captured = capsys.readouterr()
    assert "--shards" in captured.out + captured.err


def test_sharding_comes_from_the_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIOPERATOR_SHARDS", "auto")
    monkeypatch.setenv("TRIOPERATOR_SHARD_RING", "green")
    sharding = _operator_from(["run"], tmp_path, monkeypatch).settings.sharding
    assert (sharding.enabled, sharding.ring) == (True, "green")


def test_freeze_reads_only_the_peering_from_the_environment(monkeypatch: Any) -> None:
    # An operator's pod may carry TRIOPERATOR_PRIORITY/TRIOPERATOR_ID: a freeze run there by
    # hand must keep its own priority (above the operator's) and identity, not the operator's.
    monkeypatch.setenv("TRIOPERATOR_PEERING", "from-env")
    monkeypatch.setenv("TRIOPERATOR_PRIORITY", "7")
    monkeypatch.setenv("TRIOPERATOR_ID", "the-operator")
    _, bound, *_ = app.parse_args(["freeze", "-t", "60"])
    assert bound.arguments == {"peering": "from-env", "lifetime": 60}
