"""Typed resources: the cost per object of a typed spec against dict access, in-process.

Reads the fields of the example Widget's spec (``examples/typed/widgets.py``) the way a
handler does, per object, and reports microseconds per object (best of several rounds)::

    python benchmarks/bench_typed.py [--objects N] [--rounds R]

Compared:

* ``dict access``: ``spec["image"]``, ``spec.get("replicas", 1)``, ... (Kopf's way, no checks);
* ``msgspec.convert``: the spec dict decoded into ``WidgetSpec`` (strict types, constraints),
  then the same fields read as attributes;
* ``typed handler call``: the whole wrapper a typed handler is registered as
  (``_runtime/handling/typed_calls.py``): decoding ``spec`` and ``status``, the call, encoding the
  returned ``WidgetStatus`` into a dict -- against calling the dict handler directly.

A dict handler is registered unwrapped: for it, the typed feature costs nothing per event.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trioperator._engine.bodies import Body
from trioperator._engine.registry import OperatorRegistry
from trioperator._runtime.handling.typed_calls import typed_handler
from trioperator._runtime.program.loading import load_operator_code

ROOT = Path(__file__).resolve().parent.parent

# The example's models, loaded as `trioperator run` loads it (its handlers go nowhere).
load_operator_code([ROOT / "examples" / "typed" / "widgets.py"], [], registry=OperatorRegistry())
_module = next(m for n, m in sys.modules.items() if n.endswith("_widgets"))
WidgetSpec = _module.WidgetSpec
WidgetStatus = _module.WidgetStatus


def make_bodies(count: int) -> list[dict[str, Any]]:
    rng = random.Random(42)
    return [
        {
            "apiVersion": "examples.trioperator.dev/v1",
            "kind": "Widget",
            "metadata": {"name": f"widget-{i}", "namespace": "default", "uid": f"uid-{i}"},
            "spec": {
                "image": f"nginx:1.{rng.randint(10, 27)}",
                "replicas": rng.randint(0, 10),
                "mode": rng.choice(["fast", "safe"]),
                "port": rng.choice([80, "http"]),
                "nodeLabels": {"tier": "web", "zone": f"z{rng.randint(1, 3)}"},
                "settings": {"anything": ["goes", "here"], "n": i},
            },
            "status": {"replicas": rng.randint(0, 10), "phase": "Running"},
        }
        for i in range(count)
    ]


def dict_access(spec: Any) -> int:
    image = spec["image"]
    replicas = spec.get("replicas", 1)
    mode = spec.get("mode", "safe")
    port = spec.get("port", 80)
    labels = spec.get("nodeLabels", {})
    return len(image) + replicas + len(mode) + len(str(port)) + len(labels)


def typed_access(spec: Any) -> int:
    typed = msgspec.convert(spec, WidgetSpec)
    return (
        len(typed.image)
        + typed.replicas
        + len(typed.mode)
        + len(str(typed.port))
        + len(typed.node_labels)
    )


def dict_handler(spec: Any, status: Any, **_: Any) -> dict[str, Any]:
    return {"replicas": spec.get("replicas", 1) + dict_access(spec) * 0, "phase": "Running"}


def typed_fn(spec: WidgetSpec, status: WidgetStatus, **_: Any) -> WidgetStatus:  # type: ignore[valid-type]
    return WidgetStatus(replicas=spec.replicas + typed_access_attrs(spec) * 0, phase="Running")


def typed_access_attrs(spec: Any) -> int:
    return len(spec.image) + spec.replicas + len(spec.mode) + len(str(spec.port))


def best_us(fn: Callable[[], object], count: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bodies = [Body(body) for body in make_bodies(args.objects)]
    specs = [body.spec for body in bodies]
    wrapper = typed_handler(typed_fn, field=None)
    assert wrapper is not None
    kwargs = [{"body": b, "spec": b.spec, "status": b.status} for b in bodies]

    results = {
        "dict access": best_us(lambda: [dict_access(s) for s in specs], args.objects, args.rounds),
        "msgspec.convert + attributes": best_us(
            lambda: [typed_access(b["spec"]) for b in bodies], args.objects, args.rounds
        ),
        "dict handler call": best_us(
            lambda: [dict_handler(**kw) for kw in kwargs], args.objects, args.rounds
        ),
        "typed handler call (decode spec+status, encode status)": best_us(
            lambda: [wrapper(**kw) for kw in kwargs], args.objects, args.rounds
        ),
    }
    print(f"{args.objects} objects, best of {args.rounds} rounds, µs per object:")
    for name, micros in results.items():
        print(f"  {name:<58} {micros:7.2f}")


if __name__ == "__main__":
    main()
