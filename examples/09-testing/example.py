"""An operator worth testing: it greets each KopfExample, follows one field, and says goodbye.

``test_example.py`` next to it tests this file without a cluster, in both of the styles that
``trioperator.testing`` offers (see docs/testing.md).
"""

import trioperator as kopf


@kopf.on.create("kopfexamples")
def create_fn(spec, name, logger, **kwargs):
    logger.info("And here we are!")
    return {"message": f"hello {name}"}  # -> status.create_fn.message


@kopf.on.field("kopfexamples", field="spec.field")
async def field_fn(old, new, patch, logger, **kwargs):
    logger.info(f"The field has changed: {old} -> {new}")
    patch.status["seen"] = new  # -> status.seen


@kopf.on.delete("kopfexamples")
def delete_fn(name, logger, **kwargs):
    logger.info(f"Goodbye, {name}.")
