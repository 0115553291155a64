"""The smallest "operator" there is, for the open loop's floor (issue #33 item 2): a raw client.

    <kopf-venv>/bin/python benchmarks/operators/raw.py -n NAMESPACE

No framework: asyncio + aiohttp (the lighter of the benchmarks' two raw clients), one list, then
one watch stream; for every object it sees without ``status.create_fn`` it sends, in a task of
its own, the same two merge-patches a framework sends for one handled creation (the diff-base
annotation on the body, then the handler's result into the status, ``by: raw``). No retries
but the server's 429/5xx, no state beyond the names in flight.

Run as the "operator" of an open-loop run at the top rate, its latency from create to handled
is what the API server (with etcd) and the load generator take on this machine with next to
nothing in between: the share of a framework's p95 that no framework can remove. SIGINT ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubeconf import collection_path, load_cluster, object_path
from load import MERGE, RETRIABLE, body_patch

RESULT = {"status": {"create_fn": {"message": "created", "by": "raw", "size": 5}}}


async def operate(namespace: str, kubeconfig: str | None) -> None:
    import aiohttp

    with tempfile.TemporaryDirectory(prefix="bench-raw-") as tmp:
        cluster = load_cluster(kubeconfig, tmp_dir=tmp)
        connector = aiohttp.TCPConnector(limit=64, ssl=cluster.ssl_context())
        async with aiohttp.ClientSession(
            base_url=cluster.server,
            connector=connector,
            headers=cluster.headers(),
            timeout=aiohttp.ClientTimeout(total=60),
        ) as session:
            in_flight: set[str] = set()
            tasks: set[asyncio.Task[None]] = set()

            async def patch(path: str, body: dict[str, Any]) -> None:
                data = json.dumps(body)
                for attempt in range(8):
                    async with session.patch(
                        path, data=data, headers={"Content-Type": MERGE}
                    ) as response:
                        await response.read()
                        if response.status not in RETRIABLE:
                            return
                    await asyncio.sleep(0.05 * 2**attempt)

            async def handle(name: str, index: int) -> None:
                try:
                    await patch(object_path(namespace, name), body_patch(index))
                    await patch(object_path(namespace, name, "status"), RESULT)
                finally:
                    in_flight.discard(name)

            def see(obj: dict[str, Any]) -> None:
                name = obj["metadata"]["name"]
                if name in in_flight or (obj.get("status") or {}).get("create_fn"):
                    return
                in_flight.add(name)
                index = int((obj.get("spec") or {}).get("index", 0))
                task = asyncio.create_task(handle(name, index))
                tasks.add(task)  # kept until done: the loop holds tasks only weakly
                task.add_done_callback(tasks.discard)

            path = collection_path(namespace)
            version: str | None = None
            while True:
                if version is None:
                    async with session.get(path) as response:
                        listing = await response.json()
                    for obj in listing.get("items", []):
                        see(obj)
                    version = listing["metadata"]["resourceVersion"]
                params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "600"}
                timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
                async with session.get(path, params=params, timeout=timeout) as response:
                    if response.status == 410:
                        version = None
                        continue
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = None
                            break
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event.get("type") == "ADDED":
                            see(obj)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("--kubeconfig", default=None)
    args = parser.parse_args()
    try:
        asyncio.run(operate(args.namespace, args.kubeconfig))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
