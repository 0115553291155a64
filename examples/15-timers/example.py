"""Timers: a handler called on a schedule for every object, whether it changes or not.

`interval` is the pause between calls (`sharp=True`: the calls stay on the interval's grid,
however long each takes); `idle` postpones calls until the object has had no essential change
(spec, labels, annotations) for that long; `initial_delay` postpones the very first call.
Results go to the object's status; `patch` is applied after every call.
"""

import random

import trioperator as kopf


@kopf.timer("kopfexamples", interval=2.0)
def ping(name, logger, **kwargs):
    logger.info(f"TIMER: ping of {name}")
    return random.randint(0, 100)


@kopf.timer("kopfexamples", interval=3.0, sharp=True, initial_delay=1.0)
async def tick_sharp(memo, patch, **kwargs):
    # `memo` is per object and in memory only; the patch goes to the object after the call.
    memo.ticks = memo.get("ticks", 0) + 1
    patch.status["ticks"] = memo.ticks


@kopf.timer("kopfexamples", idle=5.0, interval=10.0)
def calm(spec, logger, **kwargs):
    logger.info(f"TIMER: the object has been calm for a while: field={spec.get('field')!r}")
    return {"calm": True}
