"""Kopf's own examples, unchanged but for the import line, against the real kube-apiserver.

The examples come from Kopf's sdist on PyPI (cached under ``~/.cache/trioperator/``), never from
this repository. Each one is run as Kopf's README and e2e tests run it: the operator is started
on the example file, ``examples/obj.yaml`` is created, patched where the example has update
handlers, and deleted; the operator then gets SIGTERM. What is checked is what a user sees in
the log: every handler that should succeed succeeds exactly once (timers and event handlers at
least once), the expected failures fail exactly once, and the operator exits with 0.

Kopf's e2e harness shortens the default retry backoff through its settings; the same is done
here by a small extra file loaded before the example (an ``on.startup`` that sets the setting).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Kubectl, OperatorProcess

KOPF_VERSION = "1.45.2"
# As Kopf's own e2e test counts them, but never inside a quoted string (e.g. a progress record's
# "message" in a logged body, where the quotes are escaped).
SUCCESS = re.compile(r"(?<!\\)'([^'\\\n]+)' succeeded")
FAILURE = re.compile(r"(?<!\\)'([^'\\\n]+)' failed (?:permanently|with an exception and will stop)")
FRAMEWORK_LOGINS = (
    "login_with_kubeconfig",
    "login_with_service_account",
    "login_via_client",
    "login_via_pykube",
    "login_via_async_client",
)
UNEXPECTED = re.compile(r"failed with an exception and will (?:try again in [^:]*|stop now): (.*)")
IMPORT_LINE = re.compile(r"^import kopf$", re.MULTILINE)


E2E_SETTINGS = """
import trioperator as kopf


@kopf.on.startup()
def e2e_settings(settings, **_):
    # As Kopf's own e2e harness does: retries of unexpected errors come after 1s, not 60s.
    settings.execution.default_backoff = 1
"""

# Without resource-changing handlers, Kopf does not log "Deleted, really deleted" (neither do we).
RELEASED = r"Removing the finalizer, thus allowing the actual deletion"

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "kopf-example-pod", "labels": {"app": "kopf-example"}},
    "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "1"]}]},
}

# No kube-controller-manager runs: the namespace's default service account is made by hand,
# without a token (which only the controller-manager could issue), so that pods can be created.
SERVICE_ACCOUNT = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {"name": "default"},
    "automountServiceAccountToken": False,
}


@dataclasses.dataclass(frozen=True)
class Case:
    """How to drive one example and what its log must show."""

    name: str
    succeeded: dict[str, int]
    """Handlers that succeed, and how many times; any other success is a failure of the test."""
    repeating: frozenset[str] = frozenset()
    """Handlers that succeed at least once (timers, event handlers), not counted exactly."""
    failed: dict[str, int] = dataclasses.field(default_factory=dict)
    created: tuple[str, ...] = (r"Creation is processed:",)
    """Log lines to wait for, in order, once the object is created."""
    patches: tuple[tuple[dict[str, Any], str], ...] = ()
    """Merge patches of the object, each with the log line to wait for after it."""
    deleted: str = r"Deleted, really deleted"
    after_deletion: tuple[str, ...] = ()
    startup: str = r"The operator is ready"
    pod_before: bool = False
    """A pod exists in the namespace before the operator starts (for pod handlers)."""
    pod_after: bool = False
    """A pod is created once the operator is ready, and deleted (for pod handlers)."""
    uses_object: bool = True
    """The example handles ``kopfexamples``: the object is created, patched, deleted."""
    errors: tuple[str, ...] = ()
    """Exceptions that handlers are expected to raise (by message); any other fails the test."""
    tracebacks: bool = False


CASES = [
    Case("01-minimal", {"create_fn": 1}),
    Case("02-children", {"create_fn": 1}),
    Case(
        "03-exceptions",
        {"eventual_success_with_a_few_messages": 1},
        failed={
            "eventual_failure_with_tracebacks": 1,
            "instant_failure_with_traceback": 1,
            "instant_failure_with_only_a_message": 1,
        },
        tracebacks=True,
        errors=("An error that is supposed to be recoverable.",),
    ),
    Case("04-events", {"create_fn": 1}),
    Case(
        "05-handlers",
        {
            "create_fn_1": 1,
            "create_fn_2": 1,
            "update_fn": 1,
            "field_fn/spec.field": 2,  # on creation (the field appears) and on the patch
            "delete_fn_1": 1,
            "delete_fn_2": 1,
        },
        patches=(({"spec": {"field": "changed"}}, r"Updating is processed:"),),
    ),
    Case("06-peering", {"create_fn": 1}),
    Case("07-subhandlers", {"create_fn/item1": 1, "create_fn/item2": 1, "create_fn": 1}),
    Case(
        "08-events",
        {"normal_event_fn": 2},  # ADDED and DELETED, as Kopf's own e2e test expects
        created=(r"Handler 'normal_event_fn' succeeded",),
        deleted=r"DELETED",
        tracebacks=True,
        errors=("Oops!",),
    ),
    Case("09-testing", {"create_fn": 1}),
    Case(
        "10-builtins",
        {"pod_in_sight": 1, "pod_deleted": 1},
        pod_after=True,
        uses_object=False,
    ),
    Case(
        "11-filtering-handlers",
        {
            "create_with_labels_matching": 1,
            "create_with_labels_present": 1,
            "create_with_labels_absent": 1,
            "create_with_labels_callback_matching": 1,
            "create_with_annotations_matching": 1,
            "create_with_annotations_present": 1,
            "create_with_annotations_absent": 1,
            "create_with_filter_satisfied": 1,
            "create_with_field_value_satisfied/spec.field": 1,
            "create_with_field_presence_satisfied/spec.field": 1,
            "update_with_field_change_satisfied/spec.field": 1,
            "daemon_with_field/spec.field": 1,
        },
        created=(r"Creation is processed:", r"Field daemon is satisfied\."),
        patches=(({"spec": {"field": "changed"}}, r"Updating is processed:"),),
    ),
    Case(
        "13-hooks",
        {"startup_fn_simple": 1, "startup_fn_retried": 1, "cleanup_fn": 1},
        repeating=frozenset({"pod_task", "tasks_count", "monitored_objects", "login_fn"}),
        startup=r"Served by the background task\.",
        pod_before=True,
        uses_object=False,
    ),
    Case(
        "14-daemons",
        {"background_sync": 1},
        created=(r"=> Ping from a sync daemon", r"=> Ping from an async daemon"),
        deleted=RELEASED,
        # Kopf's own e2e test waits for these (as the example's comments describe).
        after_deletion=(r"'background_async' is cancelled", r"'background_sync' has exited"),
    ),
    Case(
        "15-timers",
        {},
        repeating=frozenset({"every_few_seconds_sync", "every_few_seconds_async"}),
        created=(r"Ping from a sync timer", r"Ping from an async timer"),
        deleted=RELEASED,
    ),
    Case(
        "16-indexing",
        {},
        # Indexers run on every event of every pod; the timer every 5 seconds.
        repeating=frozenset({"intervalled", "is_running", "by_label"}),
        created=(r"'intervalled' succeeded",),
        deleted=RELEASED,
        pod_before=True,
    ),
    Case(
        "99-all-at-once",
        {
            "startup_fn_simple": 1,
            "startup_fn_retried": 1,
            "create_1": 1,
            "create_2": 1,
            "create_pod": 1,
            "update": 1,
            "update_lst/spec.lst": 1,
            "delete": 1,
            "cleanup_fn": 1,
        },
        repeating=frozenset({"example_pod_change"}),
        patches=(({"spec": {"lst": ["a", "b"]}}, r"Updating is processed:"),),
        tracebacks=True,
        errors=("Whoops!",),
    ),
]


def _params(cases: list[Case]) -> list[Any]:
    return [pytest.param(case, id=case.name) for case in cases]


# ----------------------------------------------------------------------------- Kopf's sdist


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trioperator" / f"kopf-{KOPF_VERSION}-examples"


@pytest.fixture(scope="session")
def kopf_examples() -> Path:
    """The ``examples/`` directory of Kopf's sdist, downloaded once from PyPI and cached.

    ``TRIOPERATOR_KOPF_EXAMPLES`` names a directory to use instead (e.g. offline, or a checkout).
    """
    local = os.environ.get("TRIOPERATOR_KOPF_EXAMPLES")
    if local:
        return Path(local)
    target = _cache_dir()
    if (target / "crd.yaml").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--no-binary", ":all:", "--dest", scratch, f"kopf=={KOPF_VERSION}",
            ],
            check=True,
            timeout=300,
        )  # fmt: skip
        (sdist,) = Path(scratch).glob("kopf-*.tar.gz")
        prefix = f"kopf-{KOPF_VERSION}/examples/"
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
            for member in members:
                member.name = member.name[len(prefix) :]
            archive.extractall(Path(scratch) / "examples", members=members, filter="data")
        # Renamed into place only when complete: an interrupted download is never reused.
        try:
            (Path(scratch) / "examples").rename(target)
        except OSError:
            if not (target / "crd.yaml").is_file():
                raise
    return target


@pytest.fixture(scope="session")
def kopf_crd(kubectl: Kubectl, kopf_examples: Path) -> None:
    kubectl("apply", "-f", str(kopf_examples / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/kopfexamples.kopf.dev", "--timeout=30s")


def _example_source(kopf_examples: Path, name: str, tmp_path: Path) -> Path:
    """The example as Kopf ships it, with only ``import kopf`` replaced."""
    source = (kopf_examples / name / "example.py").read_text()
    replaced, count = IMPORT_LINE.subn("import trioperator as kopf", source)
    assert count == 1, f"{name}: expected exactly one 'import kopf' line"
    directory = tmp_path / name
    directory.mkdir()
    path = directory / "example.py"
    path.write_text(replaced)
    return path


# ------------------------------------------------------------------------------------ driving


@pytest.fixture
def pods_allowed(kubectl: Kubectl, namespace: str) -> str:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(SERVICE_ACCOUNT))
    return namespace


def _wait(process: OperatorProcess, pattern: str, case: Case, timeout: float = 40) -> None:
    """Wait for a log line, but give up at once if the operator dies or shows a traceback."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.process.poll() is None:
        if process.count(pattern):
            return
        output = process.output
        if not case.tracebacks and "Traceback (most recent call last)" in output:
            break
        if any(error not in case.errors for error in UNEXPECTED.findall(output)):
            break  # retrying it would only repeat it: no need to wait for the timeout
        time.sleep(0.1)
    if process.count(pattern):
        return
    raise AssertionError(f"{pattern!r} not seen; output:\n{process.output[-8000:]}")


def _terminate(process: OperatorProcess, timeout: float = 30) -> int | None:
    if process.process.poll() is None:
        process.process.send_signal(signal.SIGTERM)
        try:
            process.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    return process.process.poll()


def _check_counts(output: str, case: Case) -> None:
    successes = collections.Counter(SUCCESS.findall(output))
    # The harness's settings file and the framework's own login handlers: once, as any handler.
    for name in [*FRAMEWORK_LOGINS, "e2e_settings"]:
        assert successes.pop(name, 0) <= 1, name
    repeating = {name: successes.pop(name, 0) for name in case.repeating}
    assert dict(successes) == case.succeeded, output[-8000:]
    never = [name for name, count in repeating.items() if not count and name in _required(case)]
    assert not never, f"never succeeded: {never}"
    failures = collections.Counter(FAILURE.findall(output))
    assert dict(failures) == case.failed, output[-8000:]
    if not case.tracebacks:
        assert "Traceback (most recent call last)" not in output


def _check_object_lines(output: str, source: str, namespace: str) -> None:
    """The lines Kopf's own e2e test looks for, by the kinds of handlers the example has."""
    prefix = f"[{namespace}/kopf-example-1]"
    creates = "@kopf.on.create('kopfexamples'" in source
    deletes = re.search(r"@kopf\.on\.delete\('kopfexamples'(?![^)]*optional=True)", source)
    changes = creates or deletes or "@kopf.on.update('kopfexamples'" in source
    if deletes:
        assert f"{prefix} Adding the finalizer" in output
        assert f"{prefix} Deletion is in progress:" in output
    if creates:
        assert f"{prefix} Creation is in progress:" in output
    if changes:
        assert f"{prefix} Deleted, really deleted" in output


def _required(case: Case) -> set[str]:
    # Probes and the login handler run only when asked or needed; the rest must have run.
    optional = {"tasks_count", "monitored_objects", "login_fn", "pod_task"}
    return set(case.repeating) - optional


def _drive_the_object(
    process: OperatorProcess, case: Case, kubectl: Kubectl, namespace: str, obj: Path
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(obj))
    for stopword in case.created:
        _wait(process, stopword, case)
    for patch, stopword in case.patches:
        kubectl(
            "patch", "kopfexample", "kopf-example-1", "-n", namespace,
            "--type=merge", "-p", json.dumps(patch),
        )  # fmt: skip
        _wait(process, stopword, case)
    kubectl("delete", "-n", namespace, "kopfexample", "kopf-example-1", "--wait=false")
    _wait(process, case.deleted, case)
    for stopword in case.after_deletion:
        _wait(process, stopword, case)


@pytest.mark.parametrize("case", _params(CASES))
def test_kopf_example(
    case: Case,
    kopf_crd: None,
    kopf_examples: Path,
    kubectl: Kubectl,
    pods_allowed: str,
    run_operator: Any,
    tmp_path: Path,
) -> None:
    namespace = pods_allowed
    example = _example_source(kopf_examples, case.name, tmp_path)
    settings = tmp_path / "e2e_settings.py"
    settings.write_text(E2E_SETTINGS)
    pod = json.dumps(POD)
    if case.pod_before:
        kubectl("apply", "-n", namespace, "-f", "-", input=pod)

    process: OperatorProcess = run_operator(
        # The settings first: its startup handler runs before the example's.
        "--standalone",
        "-n",
        namespace,
        str(settings),
        str(example),
    )
    _wait(process, case.startup, case)
    if case.pod_after:
        kubectl("apply", "-n", namespace, "-f", "-", input=pod)
        _wait(process, r"Handler 'pod_in_sight' succeeded", case)
        kubectl("delete", "-n", namespace, "pod", POD["metadata"]["name"], "--wait=false")
        _wait(process, r"Handler 'pod_deleted' succeeded", case)
    if case.uses_object:
        _drive_the_object(process, case, kubectl, namespace, kopf_examples / "obj.yaml")

    assert _terminate(process) == 0, process.output[-8000:]
    _check_counts(process.output, case)
    if case.uses_object:
        _check_object_lines(process.output, example.read_text(), namespace)


# ---------------------------------------------------------------------------- 12-embedded


@pytest.fixture
def default_namespace_objects(kubectl: Kubectl) -> Iterator[None]:
    """12-embedded works in the namespace "default" (hard-coded): leave nothing behind there.

    It also watches the whole cluster and gives each object one second between its creation
    and its deletion: the objects of earlier tests' namespaces that are still being deleted
    would all come first in its listing. So it starts once they are gone (at most 60 s).
    """
    deadline = time.monotonic() + 60
    while kubectl.get("kopfexamples", "-A").get("items") and time.monotonic() < deadline:
        time.sleep(0.5)
    yield
    for step in range(3):
        name = f"kopf-example-{step}"
        kubectl(
            "patch", "kopfexample", name, "-n", "default", "--type=merge",
            "-p", '{"metadata":{"finalizers":null}}', check=False,
        )  # fmt: skip
        kubectl("delete", "kopfexample", name, "-n", "default", "--wait=false", check=False)


def test_kopf_example_embedded(
    kopf_crd: None,
    kopf_examples: Path,
    kubeconfig: Path,
    default_namespace_objects: None,
    tmp_path: Path,
) -> None:
    example = _example_source(kopf_examples, "12-embedded", tmp_path)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    program = OperatorProcess([sys.executable, str(example)], env)
    try:
        # The program ends by itself after 3 objects (~10s); a thread that died ends nothing.
        deadline = time.monotonic() + 60
        while program.process.poll() is None and time.monotonic() < deadline:
            if "Exception in thread" in program.output:
                break
            time.sleep(0.2)
    finally:
        returncode = program.stop()
    output = program.output
    assert returncode == 0, output[-8000:]
    # What its handlers print, once per object (they are the only ones with these names; the
    # log lines have no [namespace/name] prefix: `kopf.configure()` leaves it off, as Kopf's).
    for step in range(3):
        assert output.count(f"Hello, kopf-example-{step}!") == 1, output[-8000:]
        assert output.count(f"Good bye, kopf-example-{step}!") == 1, output[-8000:]
    assert not FAILURE.findall(output), output[-8000:]
    assert "Traceback (most recent call last)" not in output


def test_the_examples_are_all_covered(kopf_examples: Path) -> None:
    """Every example of the sdist is run here, except admission (the admission issue's)."""
    shipped = {path.parent.name for path in kopf_examples.glob("*/example.py")}
    covered = {case.name for case in CASES} | {"12-embedded", "17-admission"}
    assert shipped == covered


def test_only_the_import_line_is_changed(kopf_examples: Path, tmp_path: Path) -> None:
    for name in ("01-minimal", "99-all-at-once"):
        original = (kopf_examples / name / "example.py").read_text().splitlines()
        changed = _example_source(kopf_examples, name, tmp_path).read_text().splitlines()
        differences = [(a, b) for a, b in zip(original, changed, strict=True) if a != b]
        assert differences == [("import kopf", "import trioperator as kopf")]
