"""Credentials from the client libraries, against the real kube-apiserver.

Kopf operators rely on pykube-ng / kubernetes being installed to authenticate (no ``@on.login``
handler of their own), and create their children through those libraries after ``adopt()``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.api import APIClient
from trioperator._client.credentials import Vault
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings
from trioperator._engine.settings import OperatorSettings

from tests.e2e.conftest import Kubectl, framework_operator_file, start_trioperator

NAMESPACES = Resource(group="", version="v1", plural="namespaces", kind="Namespace")


@pytest.fixture
def kubeconfig_env(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


async def _login(name: str) -> kopf.ConnectionInfo:
    fn = getattr(kopf, name)
    kwargs = {"logger": logging.getLogger("e2e"), "settings": OperatorSettings()}
    if name == "login_via_async_client":
        info = await fn(**kwargs)
    else:
        info = await trio.to_thread.run_sync(lambda: fn(**kwargs))
    assert isinstance(info, kopf.ConnectionInfo)
    return info


@pytest.fixture(params=["login_via_client", "login_via_async_client", "login_via_pykube"])
async def api(request: Any, kubeconfig_env: None) -> AsyncIterator[APIClient]:
    info = await _login(request.param)
    async with APIClient(Vault({request.param: info}), NetworkingSettings()) as client:
        yield client


async def test_library_credentials_work_for_api_calls(api: APIClient, namespace: str) -> None:
    body = await api.get(NAMESPACES, name=namespace)
    assert body["metadata"]["name"] == namespace


OPERATOR = """
{import_line}
import pykube

# No @kopf.on.login: the installed client libraries authenticate the operator.


@kopf.on.create("kopfexamples")
def create_fn(body, **_):
    api = pykube.HTTPClient(pykube.KubeConfig.from_env())
    child = {{"apiVersion": "v1", "kind": "ConfigMap", "data": {{"from": "{framework}"}}}}
    kopf.adopt(child)
    pykube.ConfigMap(api, child).create()
    return {{"child": child["metadata"].get("generateName")}}
"""


def test_operator_without_login_handlers_uses_the_libraries_and_adopts_children(
    tmp_path: Path, kubectl: Kubectl, example_crd: None, namespace: str, run_operator: Any
) -> None:
    path = framework_operator_file(tmp_path, OPERATOR, "trioperator")
    process = start_trioperator(run_operator, "--namespace", namespace, path)
    assert process.count(r"Activity 'login_via_pykube' succeeded") == 1
    assert process.count(r"Activity 'login_via_client' succeeded") == 1
    assert process.count(r"login_with_kubeconfig") == 0  # only when no library is installed

    kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=(
            "apiVersion: kopf.dev/v1\nkind: KopfExample\n"
            "metadata: {name: parent, labels: {app: demo}}\nspec: {}\n"
        ),
    )
    process.wait_for(r"Handler 'create_fn' succeeded")
    parent = kubectl.get("kopfexample", "parent", "-n", namespace)
    (child,) = kubectl.get("configmaps", "-n", namespace, "-l", "app=demo")["items"]

    # What the API server stored: owned by the parent (for garbage collection), named after it.
    assert child["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "name": "parent",
            "uid": parent["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert child["metadata"]["name"].startswith("parent-")
    assert child["data"] == {"from": "trioperator"}
    assert parent["status"]["create_fn"] == {"child": "parent-"}


SIMPLE = """
{import_line}


@kopf.on.create("kopfexamples")
def create_fn(**_):
    return {{"by": "{framework}"}}
"""

# `python -c` that hides the given libraries from the operator, then runs the CLI.
HIDING = (
    "import sys\n"
    "for name in sys.argv.pop(1).split(','):\n"
    "    sys.modules[name] = None  # `import name` fails, as if it was not installed\n"
    "from trioperator.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize(
    ("hidden", "used", "unused"),
    [
        ("pykube,kubernetes", ["login_via_async_client"], ["login_via_client", "login_via_pykube"]),
        (
            "pykube,kubernetes,kubernetes_asyncio",
            ["login_with_kubeconfig"],
            ["login_via_client", "login_via_async_client", "login_via_pykube"],
        ),
    ],
)
def test_fallbacks_follow_the_installed_libraries(
    hidden: str,
    used: list[str],
    unused: list[str],
    tmp_path: Path,
    kubectl: Kubectl,
    example_crd: None,
    namespace: str,
    run_operator: Any,
) -> None:
    path = framework_operator_file(tmp_path, SIMPLE, "trioperator")
    command = [sys.executable, "-c", HIDING, hidden, "run", "--verbose"]
    process = run_operator("--namespace", namespace, path, command=command)
    process.wait_for("The operator is ready")
    for name in used:
        assert process.count(f"Activity '{name}' succeeded") == 1
    for name in unused:
        assert process.count(name) == 0

    kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input="apiVersion: kopf.dev/v1\nkind: KopfExample\nmetadata: {name: kex}\nspec: {}\n",
    )
    process.wait_for(r"Handler 'create_fn' succeeded")
    assert kubectl.get("kopfexample", "kex", "-n", namespace)["status"]["create_fn"] == {
        "by": "trioperator"
    }
