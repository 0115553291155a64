"""Several handlers of one resource: creation, resuming, updates, a field, and deletion."""

import trioperator as kopf


@kopf.on.resume("kopfexamples")
def resume_fn_1(reason, **kwargs):
    print(f"RESUMED 1st: {reason}")


@kopf.on.create("kopfexamples")
def create_fn_1(spec, **kwargs):
    print(f"CREATED 1st: {spec}")
    return {"message": "first"}


@kopf.on.resume("kopfexamples")
def resume_fn_2(reason, **kwargs):
    print(f"RESUMED 2nd: {reason}")


@kopf.on.create("kopfexamples")
async def create_fn_2(spec, **kwargs):
    print(f"CREATED 2nd: {spec}")
    return {"message": "second"}


@kopf.on.update("kopfexamples")
def update_fn(old, new, diff, **kwargs):
    print(f"UPDATED: {diff}")


@kopf.on.delete("kopfexamples")
def delete_fn_1(**kwargs):
    print("DELETED 1st")


@kopf.on.delete("kopfexamples")
async def delete_fn_2(**kwargs):
    print("DELETED 2nd")


@kopf.on.field("kopfexamples", field="spec.field")
def field_fn(old, new, **kwargs):
    print(f"FIELD CHANGED: {old} -> {new}")
