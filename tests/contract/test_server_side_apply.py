"""Server-side apply, field managers and strategic merge: the fake against kube-apiserver 1.20.

The managedFields entries are compared whole except for their ``time``; conflicts by their
whole ``Status`` body.
"""

from __future__ import annotations

from typing import Any

import httpx2 as httpx

from .conftest import GROUP, MERGE, Backend

APPLY = "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"


async def apply(
    backend: Backend, path: str, body: Any, manager: str | None, *, force: bool = False
) -> httpx.Response:
    params = {"fieldManager": manager} if manager is not None else {}
    if force:
        params["force"] = "true"
    return await backend.request("PATCH", path, body, content_type=APPLY, params=params)


async def applied(
    backend: Backend, path: str, body: Any, manager: str, *, force: bool = False
) -> dict[str, Any]:
    response = await apply(backend, path, body, manager, force=force)
    assert response.status_code in (200, 201), response.text
    result: dict[str, Any] = response.json()
    return result


def entries(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The managedFields entries, without their times (which differ between back ends), in the
    order of their operation, manager and version.

    The API server orders entries of one operation by their times in whole seconds first: two
    managers writing within a second come by name, across a second's boundary by age. Which one
    a test meets depends on the clock, so both back ends are compared in one order of our own.
    """
    found = [
        {k: v for k, v in entry.items() if k != "time"}
        for entry in obj["metadata"].get("managedFields", [])
    ]
    return sorted(
        found,
        key=lambda e: (str(e.get("operation")), str(e.get("manager")), str(e.get("apiVersion"))),
    )


def entry(manager: str, operation: str, fields: dict[str, Any], api_version: str = "v1") -> Any:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def cm(name: str, **fields: Any) -> dict[str, Any]:
    metadata = fields.pop("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **metadata},
        **fields,
    }


def conflict(*causes: tuple[str, str]) -> dict[str, Any]:
    if len(causes) == 1:
        manager, field = causes[0]
        message = f"Apply failed with 1 conflict: conflict with {manager}: {field}"
    else:
        lines: list[str] = []
        for manager in sorted({m for m, _ in causes}):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {f}" for m, f in causes if m == manager)
        message = f"Apply failed with {len(causes)} conflicts: " + "\n".join(lines)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Conflict",
        "details": {
            "causes": [
                {"reason": "FieldManagerConflict", "message": f"conflict with {m}", "field": f}
                for m, f in causes
            ]
        },
        "code": 409,
    }


# ------------------------------------------------------------------------------ apply basics


async def test_apply_creates_then_unchanged_reapply_stores_nothing(backend: Backend) -> None:
    body = cm("ac", metadata={"labels": {"app": "x"}}, data={"a": "1", "b": "2"})
    response = await apply(backend, backend.cm_path("ac"), body, "mgr")
    assert response.status_code == 201
    created = response.json()
    assert created["data"] == {"a": "1", "b": "2"}
    assert created["metadata"]["labels"] == {"app": "x"}
    assert entries(created) == [
        entry(
            "mgr",
            "Apply",
            {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
        )
    ]

    again = await applied(backend, backend.cm_path("ac"), body, "mgr")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert again == await backend.ok("GET", backend.cm_path("ac"))

    # YAML works as well as JSON.
    yaml_body = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ac\ndata:\n  a: '1'\n  b: '3'\n"
    )
    response = await backend.client.patch(
        backend.cm_path("ac"),
        content=yaml_body.encode(),
        headers={"Content-Type": APPLY},
        params={"fieldManager": "mgr"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"a": "1", "b": "3"}


async def test_apply_needs_a_manager_and_a_typed_body(backend: Backend) -> None:
    response = await apply(backend, backend.cm_path("nm"), cm("nm", data={"a": "1"}), None)
    assert response.status_code == 422
    message = "Required value: is required for apply patch"
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {message}',
        "reason": "Invalid",
        "details": {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {"reason": "FieldValueRequired", "message": message, "field": "fieldManager"}
            ],
        },
        "code": 422,
    }
    response = await apply(backend, backend.cm_path("nm"), {"metadata": {"name": "nm"}}, "m")
    assert response.status_code == 400
    assert response.json()["message"] == (
        "Incorrect version specified in apply patch. Specified patch version: , expected: v1"
    )
    assert (await backend.request("GET", backend.cm_path("nm"))).status_code == 404

    managed = cm("nm", metadata={"managedFields": [{"manager": "x"}]})
    response = await apply(backend, backend.cm_path("nm"), managed, "m")
    assert (response.status_code, response.json()["message"]) == (
        400,
        "metadata.managedFields must be nil",
    )
    response = await apply(backend, backend.cm_path("nm"), [cm("nm")], "m")
    assert response.status_code == 400
    assert response.json()["message"] == (
        "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot"
        " unmarshal array into Go value of type map[string]interface {}"
    )

    # force is for applies only.
    await backend.ok("POST", backend.cm_path(), cm("nm"))
    response = await backend.request(
        "PATCH",
        backend.cm_path("nm"),
        {"data": {"a": "1"}},
        content_type=MERGE,
        params={"fieldManager": "m", "force": "true"},
    )
    assert response.status_code == 422
    assert response.json()["details"] == {
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: may not be specified for non-apply patch",
                "field": "force",
            }
        ],
    }


async def test_apply_removes_what_its_manager_stops_applying(backend: Backend) -> None:
    path = backend.cm_path("rm")
    await applied(
        backend, path, cm("rm", metadata={"labels": {"l": "1"}}, data={"a": "1", "b": "2"}), "one"
    )
    await applied(backend, path, cm("rm", data={"b": "2", "c": "3"}), "two")
    # "one" drops a (nobody else has it), b (shared with "two": it stays) and the label.
    result = await applied(backend, path, cm("rm", data={"x": "9"}), "one")
    assert result["data"] == {"b": "2", "c": "3", "x": "9"}
    assert "labels" not in result["metadata"]
    assert entries(result) == [
        entry("one", "Apply", {"f:data": {"f:x": {}}}),
        entry("two", "Apply", {"f:data": {"f:b": {}, "f:c": {}}}),
    ]


# ------------------------------------------------------------------------------ conflicts


async def test_conflicting_appliers_and_force(backend: Backend) -> None:
    path = backend.cm_path("cf")
    await applied(backend, path, cm("cf", data={"x": "1", "y": "2"}), "first")
    before = await backend.ok("GET", path)

    response = await apply(backend, path, cm("cf", data={"x": "9"}), "second")
    assert response.status_code == 409
    assert response.json() == conflict(('"first"', ".data.x"))
    response = await apply(backend, path, cm("cf", data={"x": "9", "y": "8"}), "second")
    assert response.json() == conflict(('"first"', ".data.x"), ('"first"', ".data.y"))
    assert await backend.ok("GET", path) == before  # nothing written

    # The same value is no conflict: both own the field.
    shared = await applied(backend, path, cm("cf", data={"y": "2"}), "second")
    assert entries(shared) == [
        entry("first", "Apply", {"f:data": {"f:x": {}, "f:y": {}}}),
        entry("second", "Apply", {"f:data": {"f:y": {}}}),
    ]

    forced = await applied(backend, path, cm("cf", data={"x": "9", "y": "2"}), "second", force=True)
    assert forced["data"] == {"x": "9", "y": "2"}
    assert entries(forced) == [
        entry("first", "Apply", {"f:data": {"f:y": {}}}),
        entry("second", "Apply", {"f:data": {"f:x": {}, "f:y": {}}}),
    ]


async def test_apply_after_an_update_by_another_manager(backend: Backend) -> None:
    path = backend.cm_path("au")
    await applied(backend, path, cm("au", data={"x": "1"}), "applier")
    updated = await backend.ok(
        "PATCH",
        path,
        {"data": {"x": "2", "w": "1"}},
        content_type=MERGE,
        params={"fieldManager": "editor"},
    )
    # The update took x over from the applier.
    assert entries(updated) == [
        entry("editor", "Update", {"f:data": {"f:w": {}, "f:x": {}}}),
    ]

    response = await apply(backend, path, cm("au", data={"x": "1"}), "applier")
    assert response.status_code == 409
    assert response.json() == conflict(('"editor" using v1', ".data.x"))

    forced = await applied(backend, path, cm("au", data={"x": "1"}), "applier", force=True)
    assert forced["data"] == {"w": "1", "x": "1"}
    assert entries(forced) == [
        entry("applier", "Apply", {"f:data": {"f:x": {}}}),
        entry("editor", "Update", {"f:data": {"f:w": {}}}),
    ]


async def test_first_apply_to_an_object_without_managers(backend: Backend) -> None:
    # The real server records every write; the fake does when asked to (or when a write names
    # a manager). Without a fieldManager, the manager is named after the User-Agent.
    if backend.api is not None:
        backend.api.store.track_managed_fields = True
    created = await backend.ok("POST", backend.cm_path(), cm("fa", data={"x": "1"}))
    assert entries(created) == [entry("python-httpx2", "Update", {"f:data": {".": {}, "f:x": {}}})]
    response = await apply(backend, backend.cm_path("fa"), cm("fa", data={"x": "2"}), "mine")
    assert response.json() == conflict(('"python-httpx2" using v1', ".data.x"))


# ------------------------------------------------------------------------------ updates


async def test_updates_record_their_managers(backend: Backend) -> None:
    created = await backend.ok(
        "POST",
        backend.cm_path(),
        cm("up", metadata={"labels": {"a": "1"}}, data={"x": "1"}),
        params={"fieldManager": "creator"},
    )
    assert entries(created) == [
        entry(
            "creator",
            "Update",
            {"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}},
        )
    ]
    replaced = await backend.ok(
        "PUT",
        backend.cm_path("up"),
        cm("up", metadata={"labels": {"a": "1"}}, data={"x": "1", "y": "2"}),
        params={"fieldManager": "putter"},
    )
    assert entries(replaced) == [
        entry(
            "creator",
            "Update",
            {"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}},
        ),
        entry("putter", "Update", {"f:data": {"f:y": {}}}),
    ]
    # Removing a field takes it from its owner; a JSON patch records its manager too.
    patched = await backend.ok(
        "PATCH",
        backend.cm_path("up"),
        [{"op": "remove", "path": "/data/x"}, {"op": "add", "path": "/data/z", "value": "3"}],
        content_type="application/json-patch+json",
        params={"fieldManager": "jsonpatcher"},
    )
    assert [(e["manager"], e["fieldsV1"]) for e in entries(patched)] == [
        ("creator", {"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}}),
        ("jsonpatcher", {"f:data": {"f:z": {}}}),
        ("putter", {"f:data": {"f:y": {}}}),
    ]


# ------------------------------------------------------------------------------ custom resources


async def test_apply_to_a_custom_resource_and_its_status(backend: Backend) -> None:
    path = backend.widget_path("aw")
    body = backend.widget("aw", spec={"a": 1, "b": {"c": 1}, "items": [{"name": "x"}]})
    created = await applied(backend, path, body, "w")
    assert created["spec"] == body["spec"]
    assert created["metadata"]["generation"] == 1
    fields = {"f:spec": {".": {}, "f:a": {}, "f:b": {".": {}, "f:c": {}}, "f:items": {}}}
    # Custom resources are unstructured: their entries' keys come sorted.
    assert [list(e) for e in created["metadata"]["managedFields"]] == [
        ["apiVersion", "fieldsType", "fieldsV1", "manager", "operation", "time"]
    ]
    assert entries(created) == [entry("w", "Apply", fields, f"{GROUP}/v1")]

    trimmed = await applied(backend, path, backend.widget("aw", spec={"a": 1}), "w")
    assert trimmed["spec"] == {"a": 1}
    assert trimmed["metadata"]["generation"] == 2

    status = await applied(
        backend,
        backend.widget_path("aw", "status"),
        backend.widget("aw", status={"ready": True}),
        "statuser",
    )
    assert status["status"] == {"ready": True}
    assert status["spec"] == {"a": 1}
    assert status["metadata"]["generation"] == 2
    assert entries(status) == [
        entry("statuser", "Apply", {"f:status": {".": {}, "f:ready": {}}}, f"{GROUP}/v1"),
        entry("w", "Apply", {"f:spec": {".": {}, "f:a": {}}}, f"{GROUP}/v1"),
    ]

    # As in 1.20, the main resource ignores an applied status but its manager owns it.
    with_status = await applied(
        backend, path, backend.widget("aw", spec={"a": 1}, status={"seen": True}), "w"
    )
    assert with_status["status"] == {"ready": True}
    assert entries(with_status)[1] == entry(
        "w",
        "Apply",
        {"f:spec": {".": {}, "f:a": {}}, "f:status": {".": {}, "f:seen": {}}},
        f"{GROUP}/v1",
    )

    emptied = await applied(backend, path, backend.widget("aw"), "w")
    assert "spec" not in emptied
    assert [e["manager"] for e in entries(emptied)] == ["statuser"]


# ------------------------------------------------------------------------------ deployments


def deployment(name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": containers},
            },
        },
    }


def deployment_path(backend: Backend, name: str | None = None) -> str:
    base = f"/apis/apps/v1/namespaces/{backend.namespace}/deployments"
    return f"{base}/{name}" if name else base


def containers(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What the test set in the containers (the real server adds defaults around it)."""
    return [
        (
            c["name"],
            c.get("image"),
            [(e["name"], e.get("value")) for e in c.get("env", [])],
            [p["containerPort"] for p in c.get("ports", [])],
        )
        for c in obj["spec"]["template"]["spec"]["containers"]
    ]


async def test_apply_to_deployment_containers(backend: Backend) -> None:
    path = deployment_path(backend, "web")
    main = {
        "name": "main",
        "image": "nginx",
        "ports": [{"containerPort": 80}],
        "env": [{"name": "A", "value": "1"}],
    }
    created = await applied(backend, path, deployment("web", [main]), "op")
    key = 'k:{"containerPort":80,"protocol":"TCP"}'
    assert entries(created) == [
        entry(
            "op",
            "Apply",
            {
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"main"}': {
                                    ".": {},
                                    "f:env": {
                                        'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}
                                    },
                                    "f:image": {},
                                    "f:name": {},
                                    "f:ports": {key: {".": {}, "f:containerPort": {}}},
                                }
                            }
                        },
                    },
                }
            },
            "apps/v1",
        )
    ]

    # Another manager adds a container of its own: the lists merge by name.
    side = {"name": "side", "image": "busybox"}
    both = await applied(backend, path, deployment("web", [side]), "sidecar")
    assert containers(both) == [("main", "nginx", [("A", "1")], [80]), ("side", "busybox", [], [])]

    response = await apply(backend, path, deployment("web", [{**side, "image": "alpine"}]), "op")
    assert response.status_code == 409
    assert response.json() == conflict(
        ('"sidecar"', '.spec.template.spec.containers[name="side"].image')
    )

    # The operator stops applying its container: it goes, the sidecar's stays.
    pruned = await applied(backend, path, deployment("web", []), "op")
    assert containers(pruned) == [("side", "busybox", [], [])]


async def test_strategic_merge_on_deployment_containers(backend: Backend) -> None:
    main = {
        "name": "main",
        "image": "nginx",
        "ports": [{"containerPort": 80}],
        "env": [{"name": "A", "value": "1"}],
    }
    created = await backend.ok("POST", deployment_path(backend), deployment("smp", [main]))
    assert created["status"] == {}
    assert created["metadata"]["generation"] == 1
    path = deployment_path(backend, "smp")

    patched = await backend.patch(
        path,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "side", "image": "busybox"},
                            {
                                "name": "main",
                                "image": "nginx:2",
                                "env": [{"name": "B", "value": "2"}],
                            },
                        ]
                    }
                }
            }
        },
        content_type=STRATEGIC,
    )
    assert containers(patched) == [
        ("side", "busybox", [], []),
        ("main", "nginx:2", [("B", "2"), ("A", "1")], [80]),
    ]

    patched = await backend.patch(
        path,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "side", "$patch": "delete"},
                            {
                                "name": "main",
                                "ports": [{"containerPort": 81}],
                                "env": [{"name": "A", "value": None}],
                            },
                        ]
                    }
                }
            }
        },
        content_type=STRATEGIC,
    )
    assert containers(patched) == [("main", "nginx:2", [("B", "2"), ("A", None)], [81, 80])]

    replaced = await backend.patch(
        path,
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}
                }
            }
        },
        content_type=STRATEGIC,
    )
    assert containers(replaced) == [("only", "x", [], [])]

    # A merge patch replaces the list whole.
    merged = await backend.patch(
        path, {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "y"}]}}}}
    )
    assert containers(merged) == [("m", "y", [], [])]


# ------------------------------------------------------------------------------ scale


async def test_deployment_scale_subresource(backend: Backend) -> None:
    ns = backend.namespace
    path = deployment_path(backend, "sc")
    await applied(backend, path, deployment("sc", [{"name": "main", "image": "nginx"}]), "op")
    scale = await backend.ok("GET", f"{path}/scale")
    assert {k: v for k, v in scale["metadata"].items() if k in ("name", "namespace")} == {
        "name": "sc",
        "namespace": ns,
    }
    assert set(scale["metadata"]) == {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    }
    assert {k: v for k, v in scale.items() if k != "metadata"} == {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "spec": {"replicas": 1},
        "status": {"replicas": 0, "selector": "app=sc"},
    }

    scaled = await backend.ok(
        "PATCH",
        f"{path}/scale",
        {"spec": {"replicas": 3}},
        content_type=MERGE,
        params={"fieldManager": "hpa"},
    )
    assert scaled["spec"] == {"replicas": 3}
    deployment_now = await backend.ok("GET", path)
    assert deployment_now["spec"]["replicas"] == 3
    assert deployment_now["metadata"]["generation"] == 2
    # 1.20 records nothing for writes through the Scale: the applier still owns replicas.
    assert [(e["manager"], e["operation"]) for e in entries(deployment_now)] == [("op", "Apply")]

    scale_body = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "sc"}}
    response = await apply(backend, f"{path}/scale", {**scale_body, "spec": {"replicas": 4}}, "hpa")
    assert response.json() == conflict(
        ('"before-first-apply" using autoscaling/v1', ".spec.replicas")
    )
    forced = await applied(
        backend, f"{path}/scale", {**scale_body, "spec": {"replicas": 4}}, "hpa", force=True
    )
    assert forced["spec"] == {"replicas": 4}

    response = await backend.request(
        "PUT", f"{path}/scale", {**scale_body, "spec": {"replicas": 2}}
    )
    assert response.status_code == 422
    assert (
        response.json()["message"]
        == 'Scale.autoscaling "sc" is invalid: metadata.namespace: Required value'
    )
    replaced = await backend.ok(
        "PUT",
        f"{path}/scale",
        {**scale_body, "metadata": {"name": "sc", "namespace": ns}, "spec": {"replicas": 2}},
    )
    assert replaced["spec"] == {"replicas": 2}

    response = await backend.request("GET", f"{deployment_path(backend, 'nope')}/scale")
    assert response.status_code == 404
    assert response.json()["details"] == {
        "name": "nope",
        "group": "apps",
        "kind": "deployments/scale",
    }
    assert response.json()["message"] == 'deployments/scale.apps "nope" not found'

    discovery = await backend.ok("GET", "/apis/apps/v1")
    assert {
        "name": "deployments/scale",
        "singularName": "",
        "namespaced": True,
        "group": "autoscaling",
        "version": "v1",
        "kind": "Scale",
        "verbs": ["get", "patch", "update"],
    } in discovery["resources"]


# ------------------------------------------------------------------------------ metadata lists


async def test_owner_references_and_finalizers_merge_between_appliers(backend: Backend) -> None:
    path = backend.cm_path("own")

    def owner(uid: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": f"p-{uid}", "uid": uid}

    uid_a, uid_b = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
    first = {"ownerReferences": [owner(uid_a)], "finalizers": ["x.dev/a"]}
    second = {"ownerReferences": [{**owner(uid_b), "controller": True}], "finalizers": ["x.dev/b"]}
    await applied(backend, path, cm("own", metadata=first), "a")
    both = await applied(backend, path, cm("own", metadata=second), "b")
    assert [r["uid"] for r in both["metadata"]["ownerReferences"]] == [uid_a, uid_b]
    assert both["metadata"]["finalizers"] == ["x.dev/a", "x.dev/b"]
    assert entries(both) == [
        entry(
            "a",
            "Apply",
            {
                "f:metadata": {
                    "f:finalizers": {'v:"x.dev/a"': {}},
                    "f:ownerReferences": {
                        f'k:{{"uid":"{uid_a}"}}': {
                            ".": {},
                            "f:apiVersion": {},
                            "f:kind": {},
                            "f:name": {},
                            "f:uid": {},
                        }
                    },
                }
            },
        ),
        entry(
            "b",
            "Apply",
            {
                "f:metadata": {
                    "f:finalizers": {'v:"x.dev/b"': {}},
                    "f:ownerReferences": {
                        f'k:{{"uid":"{uid_b}"}}': {
                            ".": {},
                            "f:apiVersion": {},
                            "f:controller": {},
                            "f:kind": {},
                            "f:name": {},
                            "f:uid": {},
                        }
                    },
                }
            },
        ),
    ]
    # "a" lets go of its owner and finalizer: only its own go.
    alone = await applied(backend, path, cm("own"), "a")
    assert [r["uid"] for r in alone["metadata"]["ownerReferences"]] == [uid_b]
    assert alone["metadata"]["finalizers"] == ["x.dev/b"]
    # Clean up: the finalizer would keep the namespace from going away.
    await applied(backend, path, cm("own"), "b")


# ------------------------------------------------------------------------------ watches


async def test_watchers_see_applies_that_change_something_only(backend: Backend) -> None:
    # An operator that applies its children on every run must not wake itself up again.
    path = backend.cm_path("wa")
    body = cm("wa", metadata={"labels": {"watched": "yes"}}, data={"a": "1"})
    start = (await backend.ok("GET", backend.cm_path()))["metadata"]["resourceVersion"]

    async def applies() -> None:
        await applied(backend, path, body, "op")
        await applied(backend, path, body, "op")
        await applied(backend, path, {**body, "data": {"a": "2"}}, "op")

    events = await backend.watch(
        backend.cm_path(),
        {"resourceVersion": start, "labelSelector": "watched=yes"},
        count=2,
        during=applies,
    )
    assert [(e["type"], e["object"]["data"]["a"]) for e in events] == [
        ("ADDED", "1"),
        ("MODIFIED", "2"),
    ]
    assert entries(events[1]["object"]) == [
        entry("op", "Apply", {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:watched": {}}}})
    ]


async def test_managed_fields_sent_with_an_update(backend: Backend) -> None:
    path = backend.cm_path("mf")
    await applied(backend, path, cm("mf", data={"a": "1"}), "op")
    given = {
        "manager": "given",
        "operation": "Update",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:q": {}}},
    }
    # Valid entries replace the recorded ones (then the update is recorded on top).
    replaced = await backend.ok(
        "PATCH",
        path,
        {"metadata": {"managedFields": [given]}, "data": {"b": "1"}},
        content_type=MERGE,
        params={"fieldManager": "editor"},
    )
    assert entries(replaced) == [entry("editor", "Update", {"f:data": {"f:b": {}}}), given]
    # Undecodable ones are ignored whole: the recorded ones stay.
    undecodable = {k: v for k, v in given.items() if k != "fieldsType"}
    ignored = await backend.ok(
        "PATCH",
        path,
        {"metadata": {"managedFields": [undecodable]}, "data": {"c": "1"}},
        content_type=MERGE,
        params={"fieldManager": "editor"},
    )
    assert entries(ignored) == [
        entry("editor", "Update", {"f:data": {"f:b": {}, "f:c": {}}}),
        given,
    ]
