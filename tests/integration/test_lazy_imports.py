"""A plain operator started by the CLI imports nothing it does not use.

asyncio (with trio-asyncio and concurrent.futures) is imported only when asyncio is in use: a
handler of that flavour, an asyncio host program, an asyncio flag. prometheus_client only when
the metrics are read; urllib.request only when a proxy is configured in the environment. Each
module kept out is memory that every operator process pays for its whole life. Checked in a
fresh interpreter, as ``trioperator run`` starts, through to a handled object.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.integration.conftest import CRD

NOT_IMPORTED = (
    "asyncio",
    "trio_asyncio",
    "concurrent.futures",
    "prometheus_client",
    "urllib.request",
    "email",
    "http.client",
    "http.server",
    # The API client for operator code: httpx (and anyio) at the first request of a handler.
    "httpx",
    "httpcore",
    "anyio",
)

OPERATOR = """
    import trioperator as kopf

    @kopf.on.create("kopfexamples")
    async def create_fn(spec, **_):
        return {"message": spec["field"]}
"""

ASYNCIO_OPERATOR = """
    import asyncio

    import trioperator as kopf

    @kopf.on.create("kopfexamples")
    async def create_fn(spec, **_):
        await asyncio.sleep(0)  # an asyncio-flavoured handler (its module uses asyncio)
        return {"message": spec["field"]}
"""

SCRIPT = """
    import json, sys

    import trio

    from trioperator.cli import CLIControls, main
    from trioperator.testing import FakeAPIThread

    # As installed with its run-time dependencies only: the client libraries of the test
    # environment (whose credentials an operator would log in through, importing urllib3 and
    # more of their own) are not there.
    for library in ("pykube", "kubernetes", "kubernetes_asyncio"):
        sys.modules[library] = None

    crd, operator_file, kubeconfig = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    obj = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": "kopf-example-1", "namespace": "default"},
        "spec": {"field": "handled"},
    }
    report = {}

    def status(api):
        return api.get_object("kopfexamples", "kopf-example-1", "default").get("status", {})

    async def check(operator):
        await operator.ready_flag.wait()
        await trio.to_thread.run_sync(api.create_object, "kopfexamples", obj)
        while not (await trio.to_thread.run_sync(lambda: status(api))).get("create_fn"):
            await trio.sleep(0.05)
        report["status"] = (await trio.to_thread.run_sync(lambda: status(api)))["create_fn"]
        report["imported"] = sorted(sys.modules)
        operator.stop()

    def started(operator):
        trio.lowlevel.spawn_system_task(check, operator)

    with FakeAPIThread() as api:
        api.create_object("customresourcedefinitions", crd)
        api.kubeconfig(kubeconfig)
        import os

        os.environ["KUBECONFIG"] = kubeconfig
        controls = CLIControls(handle_signals=False, started=started)
        code = main(["run", "-A", operator_file], controls=controls)
    report["code"] = code
    print(json.dumps(report))
"""


def run_in_a_fresh_interpreter(tmp_path: Path, operator: str) -> dict[str, Any]:
    """Run the CLI's ``run`` over ``operator`` in a new interpreter; its report (SCRIPT)."""
    operator_file = tmp_path / "operator.py"
    operator_file.write_text(textwrap.dedent(operator))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(SCRIPT),
            json.dumps(CRD),
            str(operator_file),
            str(tmp_path / "kubeconfig"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_a_plain_operator_never_imports_asyncio(tmp_path: Path) -> None:
    report = run_in_a_fresh_interpreter(tmp_path, OPERATOR)
    assert report["code"] == 0
    assert report["status"] == {"message": "handled"}  # it ran, and handled an object
    assert [name for name in NOT_IMPORTED if name in report["imported"]] == []
    assert (
        "trioperator._runtime.handling.asyncio_bridge" in report["imported"]
    )  # the bridge is there
    assert "trioperator._runtime.support.metrics" in report["imported"]  # counting, not exporting


def test_an_asyncio_handler_still_gets_its_loop(tmp_path: Path) -> None:
    report = run_in_a_fresh_interpreter(tmp_path, ASYNCIO_OPERATOR)
    assert report["status"] == {"message": "handled"}
    assert "trio_asyncio" in report["imported"]
