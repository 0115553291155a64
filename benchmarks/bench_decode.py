"""Watch-event decoding throughput: the reused msgspec decoder vs. the alternatives.

Decodes realistic watch-stream lines (2-4 KiB each: a custom resource with labels, annotations
including Kopf's last-handled-configuration, managedFields, spec and status) and reports
events per second, best of several rounds::

    python benchmarks/bench_decode.py [--events N] [--rounds R]

Compared:

* ``decode_watch_line``: trioperator's path -- one module-level ``msgspec.json.Decoder`` for
  the ``WatchEvent`` Struct, reused for every line;
* ``msgspec typed, per call``: ``msgspec.json.decode(line, type=WatchEvent)`` (no reuse);
* ``msgspec untyped``: ``msgspec.json.decode(line)`` into plain dicts;
* ``json.loads``: the standard library, into plain dicts.

Also the line splitter alone (framing only, no decoding), to show that it is not the bottleneck.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trioperator._wire.watch import LineSplitter, WatchEvent, decode_watch_line


def _word(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(size))


def make_object(rng: random.Random, index: int) -> dict[str, Any]:
    name = f"kopf-example-{index}"
    spec = {
        "duration": f"{rng.randint(1, 60)}m",
        "field": _word(rng, 12),
        "items": [_word(rng, 8) for _ in range(rng.randint(2, 12))],
        "replicas": rng.randint(1, 9),
        "template": {"image": f"registry.example.com/{_word(rng, 10)}:v{rng.randint(1, 99)}"},
    }
    last_handled = json.dumps({"spec": spec, "metadata": {"labels": {"app": "kex"}}})
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"{rng.getrandbits(128):032x}",
            "resourceVersion": str(100000 + index),
            "generation": rng.randint(1, 20),
            "creationTimestamp": "2026-03-01T12:00:00Z",
            "labels": {"app": "kex", "somelabel": "somevalue", "tier": _word(rng, 6)},
            "annotations": {
                "someannotation": "somevalue",
                "kopf.zalando.org/last-handled-configuration": last_handled,
                "kopf.zalando.org/create_fn": json.dumps(
                    {"started": "2026-03-01T12:00:00.123456+00:00", "retries": 0, "success": True}
                ),
            },
            "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "kopf.dev/v1",
                    "time": "2026-03-01T12:00:01Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:annotations": {f"f:{_word(rng, 8)}": {}}},
                        "f:spec": {f"f:{_word(rng, 6)}": {} for _ in range(rng.randint(1, 6))},
                    },
                }
                for manager in ("kubectl-client-side-apply", "kopf", "trioperator")
            ],
        },
        "spec": spec,
        "status": {
            "create_fn": {"message": "hello world " * rng.randint(10, 120)},
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-01T12:00:02Z"}
            ],
        },
    }


def make_lines(count: int, seed: int = 42) -> list[bytes]:
    rng = random.Random(seed)
    lines = []
    for index in range(count):
        kind = rng.choice(["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"])
        doc = {"type": kind, "object": make_object(rng, index)}
        lines.append(json.dumps(doc, separators=(",", ":")).encode())
    return lines


def decode_stdlib(line: bytes) -> Any:
    return json.loads(line)


def decode_msgspec_untyped(line: bytes) -> Any:
    return msgspec.json.decode(line)


def decode_msgspec_per_call(line: bytes) -> Any:
    return msgspec.json.decode(line, type=WatchEvent)


def measure(
    candidates: list[tuple[str, Callable[[bytes], Any]]], lines: list[bytes], rounds: int
) -> dict[str, float]:
    """Best events/s of each candidate; rounds are interleaved so that background load and
    heap growth hit every candidate alike."""
    best: dict[str, float] = {label: 0.0 for label, _ in candidates}
    for _ in range(rounds):
        for label, fn in candidates:
            gc.collect()
            started = time.perf_counter()
            for line in lines:
                fn(line)
            elapsed = time.perf_counter() - started
            best[label] = max(best[label], len(lines) / elapsed)
    return best


def measure_splitter(lines: list[bytes], rounds: int, chunk_size: int = 65536) -> float:
    data = b"\n".join(lines) + b"\n"
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        splitter = LineSplitter()
        count = 0
        for chunk in chunks:
            splitter.feed(chunk)
            while splitter.pop() is not None:
                count += 1
        elapsed = time.perf_counter() - started
        assert count == len(lines)
        rates.append(count / elapsed)
    return max(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    lines = make_lines(args.events)
    sizes = [len(line) for line in lines]
    # Sanity: every method understands every line the same way.
    for line in lines[:100]:
        assert decode_watch_line(line).object == json.loads(line)["object"]

    print(
        f"{len(lines)} watch-event lines, {min(sizes)}-{max(sizes)} bytes "
        f"(median {statistics.median(sizes):.0f}), best of {args.rounds} rounds\n"
    )
    candidates: list[tuple[str, Callable[[bytes], Any]]] = [
        ("decode_watch_line (msgspec, reused)", decode_watch_line),
        ("msgspec typed, decoder per call", decode_msgspec_per_call),
        ("msgspec untyped", decode_msgspec_untyped),
        ("json.loads (stdlib)", decode_stdlib),
    ]
    results = list(measure(candidates, lines, args.rounds).items())
    baseline = dict(results)["json.loads (stdlib)"]
    mean_size = statistics.fmean(sizes)

    header = f"{'decoder':<38} {'events/s':>12} {'MiB/s':>8} {'vs json':>8}"
    print(header)
    print("-" * len(header))
    for label, rate in results:
        mib = rate * mean_size / (1024 * 1024)
        print(f"{label:<38} {rate:>12,.0f} {mib:>8.1f} {rate / baseline:>7.2f}x")
    split_rate = measure_splitter(lines, args.rounds)
    print(f"{'(line splitting only, 64 KiB chunks)':<38} {split_rate:>12,.0f}")


if __name__ == "__main__":
    main()
