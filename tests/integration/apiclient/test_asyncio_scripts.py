"""The async client under plain asyncio (anyio's asyncio backend), as a script uses it: in a
fresh interpreter, where no trio-asyncio loop is involved."""

from __future__ import annotations

import json
import sys
import textwrap

import trio
from tests.integration.apiclient.conftest import configmap
from trioperator.testing import FakeAPI

SCRIPT = """
    import asyncio, json, sys

    import trioperator as kopf

    async def main():
        credentials = kopf.ConnectionInfo(server=sys.argv[1], token="fake")
        async with kopf.connect_api(credentials=credentials) as api:
            cms = api.resource("configmaps")
            await cms.create({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "from-asyncio", "namespace": "default"},
                              "data": {"loop": type(asyncio.get_running_loop()).__module__}})
            names = [o["metadata"]["name"] for o in await cms.list(namespace="default")]
            try:
                await cms.get("missing", namespace="default")
            except kopf.APINotFoundError as exc:
                missing = exc.status
        print(json.dumps({"names": names, "missing": missing,
                          "trio_asyncio_imported": "trio_asyncio" in sys.modules}))

    asyncio.run(main())
"""


async def test_the_async_client_runs_on_plain_asyncio(fake_api: FakeAPI) -> None:
    fake_api.create_object("configmaps", configmap("existing"))
    done = await trio.run_process(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), fake_api.url],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert sorted(report["names"]) == ["existing", "from-asyncio"]
    assert report["missing"] == 404
    assert report["trio_asyncio_imported"] is False
    made = fake_api.get_object("configmaps", "from-asyncio", "default")
    assert made["data"] == {"loop": "asyncio.unix_events"}
