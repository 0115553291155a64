"""Daemons: a long-running activity per object, from its creation until its deletion.

Each daemon runs once per object (and per operator process): async ones as trio tasks, sync
ones in worker threads. They are asked to stop when their object is deleted or the operator
exits; the object keeps the operator's finalizer until its daemons have stopped.

Try it: apply ../obj.yaml, watch the log lines, then delete the object: the deletion waits
until both daemons have said goodbye.
"""

import time

import trio
import trioperator as kopf


@kopf.daemon("kopfexamples", cancellation_timeout=3.0)
async def monitor_async(name, logger, stopped, **kwargs):
    # Async daemons may ignore the flag if they have a cancellation timeout: after the
    # timeout's backoff (none here), they are cancelled at their next `await`.
    try:
        while True:
            logger.info(f"ASYNC DAEMON: {name} is being monitored.")
            await trio.sleep(5)
    except trio.Cancelled:
        logger.info("ASYNC DAEMON: cancelled, as asked.")
        raise


@kopf.daemon("kopfexamples", cancellation_backoff=10.0)
def monitor_sync(name, spec, stopped, logger, **kwargs):
    # Sync daemons run in threads, which cannot be cancelled: they must check the flag.
    # `stopped.wait(n)` is a sleep that ends early when the daemon is asked to stop.
    while not stopped:
        logger.info(f"SYNC DAEMON: {name} has field={spec.get('field')!r} (a live view).")
        stopped.wait(5)
    logger.info(f"SYNC DAEMON: stopping ({stopped.reason}); cleaning up for a second.")
    time.sleep(1)
    logger.info("SYNC DAEMON: done.")


@kopf.daemon("kopfexamples", initial_delay=2)
async def count_children(patch, retry, **kwargs):
    # Every iteration's patch is applied before the next one; a TemporaryError restarts the
    # daemon after its delay. Returning ends it for good (for this operator process).
    patch.status["daemonRounds"] = retry + 1
    if retry < 2:
        raise kopf.TemporaryError("Not enough rounds yet.", delay=1)
    return {"finished": True}
