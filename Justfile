# trioperator developer recipes. On a fresh machine run them through ./dev (it prepares .venv).

set shell := ["bash", "-euo", "pipefail", "-c"]

# The test kit's real control plane (trioperator.testing.RealControlPlane) finds etcd and
# kube-apiserver as envtest does, in $KUBEBUILDER_ASSETS: unless told otherwise, the binaries
# scripts/kube-up builds (its etcd is Debian's, found in $PATH).
export KUBEBUILDER_ASSETS := env_var_or_default("KUBEBUILDER_ASSETS", env_var_or_default("TRIOPERATOR_KUBE_CACHE", env_var_or_default("XDG_CACHE_HOME", env_var("HOME") + "/.cache") + "/trioperator/kube") + "/bin")

# list the recipes
default:
    @just --list

# every test tier but chaos: unit, integration, contract and e2e (starts the local kube-apiserver if needed)
test *ARGS:
    python -m pytest -m "not chaos" {{ARGS}}

# only the fast tiers (no kube-apiserver)
test-fast *ARGS:
    python -m pytest -m "not e2e and not chaos" {{ARGS}}

# only the end-to-end tier against the real local kube-apiserver
e2e *ARGS: cluster-up
    python -m pytest -m e2e {{ARGS}}

# sharding with replicas as processes on the local kube-apiserver (docs/sharding.md)
e2e-shards *ARGS: cluster-up
    python -m pytest -m e2e tests/e2e/test_shards.py {{ARGS}}

# the chaos tier: its own control plane (port 18443) killed, compacted, proxied (tests/chaos/RESULTS.md)
chaos *ARGS:
    python -m pytest -m chaos -o faulthandler_timeout=0 tests/chaos {{ARGS}}

# ruff, strict mypy and the import-layer contracts
lint:
    ruff check trioperator tests examples benchmarks scripts/docsite
    ruff format --check trioperator
    mypy
    lint-imports

# the documentation site into site/: mkdocs with warnings as errors, internal links and anchors
# checked (external links are not: the build is offline); the reference pages come from the code
docs:
    NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true mkdocs build --strict --clean

# serve the documentation site at http://127.0.0.1:8000, rebuilt on every change
docs-serve *ARGS:
    NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true mkdocs serve {{ARGS}}

# format the code
fmt:
    ruff format trioperator tests examples benchmarks
    ruff check --fix trioperator tests examples benchmarks

# start (or reuse) etcd + kube-apiserver on loopback; prints the kubeconfig path
cluster-up:
    scripts/kube-up

# stop the local control plane (`just cluster-down --purge` also wipes its state)
cluster-down *ARGS:
    scripts/kube-down {{ARGS}}

# the main job: an example operator against the local kube-apiserver, with an object's life
demo:
    python examples/demo.py

# the package as users get it: sdist, wheel from it, a clean venv, an example against the local kube-apiserver
check-wheel: cluster-up
    scripts/check-wheel

# `trioperator new` from this checkout's wheel: scaffold projects, install them, run their tests (--image: build one's image too)
scaffold-test *ARGS: cluster-up
    scripts/scaffold-test {{ARGS}}

# benchmarks against Kopf on the local kube-apiserver
bench *ARGS:
    python benchmarks/run.py {{ARGS}}

# the container image as an OCI archive in dist/ (buildah + Debian packages; no Docker daemon)
image *ARGS:
    scripts/build-image {{ARGS}}

# build the image, run its entrypoint against the local kube-apiserver (as PID 1, chrooted)
image-test: image cluster-up
    python -m pytest -m e2e tests/e2e/test_image.py
