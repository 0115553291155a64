"""Embedding: the operator as one part of your own trio program.

``trioperator.operator(...)`` runs an operator inside the caller's trio run, in a nursery of the
program's choosing: it starts when started, reports readiness through ``ready_flag``, stops
gracefully when ``stop_flag`` is set, and never outlives the nursery. Here the program has work
of its own (a periodic report from the operator's ``memo``) and decides when to stop.

The handlers go to a registry of this operator only, so several operators with separate
registries can run side by side in one process.

Run it as a plain program (the kubeconfig is found as kubectl finds it)::

    python examples/12-embedded/example.py [NAMESPACE ...]

Apply ../obj.yaml in one of the namespaces, then press Ctrl-C: the operator stops first, then
the program ends.
"""

import logging
import signal
import sys
from functools import partial

import trio
import trioperator as kopf

registry = kopf.OperatorRegistry()


@kopf.on.create("kopfexamples", registry=registry)
async def create_fn(name, namespace, memo: kopf.Memo, logger, **kwargs):
    memo.handled.append(f"{namespace}/{name}")
    logger.info("Handled by the embedded operator.")
    return {"message": "hello from an embedded operator"}


async def report(memo: kopf.Memo, every: float) -> None:
    """The program's own work, running next to the operator."""
    while True:
        await trio.sleep(every)
        print(f"REPORT: {len(memo.handled)} object(s) handled so far", flush=True)


async def main(namespaces: list[str]) -> None:
    memo = kopf.Memo(handled=[])
    ready, stop = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        # The operator stops when `stop` is set; the program's nursery waits for it.
        nursery.start_soon(
            partial(
                kopf.operator,
                registry=registry,
                memo=memo,
                namespaces=namespaces,
                clusterwide=not namespaces,
                ready_flag=ready,
                stop_flag=stop,
            )
        )
        await ready.wait()
        print("EMBEDDED: the operator is ready; the program goes on.", flush=True)
        async with trio.open_nursery() as program:
            program.start_soon(report, memo, 5.0)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            program.cancel_scope.cancel()
        print("EMBEDDED: stopping the operator.", flush=True)
        stop.set()
    print(f"EMBEDDED: the operator has stopped after {len(memo.handled)} object(s).", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(levelname)s] %(message)s")
    trio.run(main, sys.argv[1:])
