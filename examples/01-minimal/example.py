"""The smallest operator: one creation handler whose result lands in the object's status."""

import trioperator as kopf


@kopf.on.create("kopfexamples")
def create_fn(spec, name, logger, **kwargs):
    logger.info(f"Creating {name}: {spec}")
    return {"message": "hello world"}  # -> status.create_fn.message
