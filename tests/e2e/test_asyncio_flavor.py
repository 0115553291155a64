"""A Kopf-style operator written for asyncio, run unchanged by ``trioperator run``.

Its async handlers and daemon use ``asyncio.sleep``, an ``asyncio.Lock`` made at import time and
an aiohttp client (a GET of the operator's own liveness endpoint): the ``auto`` flavor runs them
on the operator's asyncio loop (trio-asyncio). Each handler runs exactly once per change, and
the operator stops cleanly with exit code 0.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl, start_trioperator

ASYNCIO_OPERATOR = """
import asyncio

import aiohttp
import trioperator as kopf

LOCK = asyncio.Lock()
LIVENESS = "http://127.0.0.1:PORT/healthz"


@kopf.on.create("kopfexamples", id="create_fn")
async def create_fn(logger, **_):
    loop = asyncio.get_running_loop()
    async with LOCK:
        await asyncio.sleep(0.1)
    async with aiohttp.ClientSession() as session:
        async with session.get(LIVENESS) as response:
            status = response.status
            probes = await response.json()
    assert asyncio.get_running_loop() is loop
    logger.info(f"aiohttp got {status} from the liveness endpoint.")
    return {"liveness": status, "probes": probes}


@kopf.on.probe(id="probe_fn")
async def probe_fn(**_):
    await asyncio.sleep(0.01)
    return "asyncio probe"


@kopf.on.update("kopfexamples", id="update_fn")
async def update_fn(logger, **_):
    async with LOCK:
        await asyncio.sleep(0.1)
    logger.info("Updated under asyncio.")


@kopf.on.delete("kopfexamples", id="delete_fn")
async def delete_fn(logger, **_):
    await asyncio.sleep(0.1)
    logger.info("Deleted under asyncio.")


@kopf.daemon("kopfexamples", id="daemon_fn")
async def daemon_fn(stopped, logger, **_):
    logger.info("Daemon started under asyncio.")
    while not stopped:
        async with LOCK:
            await asyncio.sleep(0.05)
        await stopped.wait(0.5)
    logger.info(f"Daemon stopped: {stopped.reason}.")
"""


EMBEDDED_PROGRAM = """
import asyncio
import logging
import threading

import trioperator as kopf

handled = threading.Event()


@kopf.on.create("kopfexamples", id="create_fn")
async def create_fn(name, logger, **_):
    await asyncio.sleep(0.1)
    logger.info(f"Handled {name} on the program's asyncio loop.")
    handled.set()


def kopf_thread(ready_flag, stop_flag):
    # As in Kopf's examples/12-embedded.
    asyncio.run(kopf.operator(
        ready_flag=ready_flag, stop_flag=stop_flag, namespaces=[NAMESPACE], standalone=True,
    ))


logging.basicConfig(level=logging.INFO)
ready_flag, stop_flag = threading.Event(), threading.Event()
thread = threading.Thread(target=kopf_thread, args=(ready_flag, stop_flag))
thread.start()
ready_flag.wait(60)
print("PROGRAM: the operator is ready.", flush=True)
handled.wait(60)
stop_flag.set()
thread.join(60)
print(f"PROGRAM: the operator thread has ended: {not thread.is_alive()}.", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_an_asyncio_operator_handles_each_change_once_and_stops_cleanly(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    port = _free_port()
    script = tmp_path / "asyncio_operator.py"
    script.write_text(ASYNCIO_OPERATOR.replace("PORT", str(port)))
    operator = start_trioperator(
        run_operator, "--standalone", "-n", namespace, "-L", f"http://127.0.0.1:{port}/healthz",
        str(script),
    )  # fmt: skip

    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for("Handler 'create_fn' succeeded.")
    operator.wait_for("Daemon started under asyncio.")
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["status"]["create_fn"] == {"liveness": 200, "probes": {"probe_fn": "asyncio probe"}}

    kubectl(
        "patch", "kopfexample", "kopf-example-1", "-n", namespace,
        "--type=merge", "-p", '{"spec": {"field": "changed"}}',
    )  # fmt: skip
    operator.wait_for("Handler 'update_fn' succeeded.")

    kubectl("delete", "kopfexample", "kopf-example-1", "-n", namespace, "--wait=false")
    operator.wait_for("Handler 'delete_fn' succeeded.")
    operator.wait_for("Daemon stopped: DaemonStoppingReason.RESOURCE_DELETED")

    assert operator.stop() == 0, operator.output
    output = operator.output
    assert "aiohttp got 200 from the liveness endpoint." in output
    for handler in ("create_fn", "update_fn", "delete_fn"):
        assert operator.count(f"Handler '{handler}' succeeded.") == 1, output
    assert operator.count("Daemon started under asyncio.") == 1
    assert "Traceback" not in output
    assert "failed with an exception" not in output
    assert "[ERROR" not in output


def test_asyncio_run_of_the_operator_in_a_thread_of_a_program(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    script = tmp_path / "embedded_program.py"
    script.write_text(EMBEDDED_PROGRAM.replace("NAMESPACE", repr(namespace)))
    program = run_operator(command=[sys.executable, str(script)])
    program.wait_for("PROGRAM: the operator is ready.")
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    program.wait_for("PROGRAM: the operator thread has ended: True.")
    assert program.process.wait(30) == 0, program.output
    assert program.count("Handled kopf-example-1 on the program's asyncio loop.") == 1
    assert "Traceback" not in program.output
