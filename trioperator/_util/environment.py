"""Every environment variable that trioperator reads, in one list.

Nothing imports this module at run time: it is the source of the configuration reference
(docs/reference/environment.md, generated when the site is built) and of a test
(tests/docs/test_reference.py) that finds each ``os.environ``/``getenv`` use in the package and
fails when its variable is missing here, so that the documented list cannot fall behind.
"""

from __future__ import annotations

import dataclasses

__all__ = ["VARIABLES", "EnvironmentVariable"]


@dataclasses.dataclass(frozen=True)
class EnvironmentVariable:
    name: str
    """The variable's name (a pattern such as ``TRIOPERATOR_<OPTION>`` for a family)."""
    description: str
    """What it changes, in a sentence or two (Markdown)."""
    read_by: str
    """Where it is read: the module, or the library that reads it for us."""
    indirect: bool = False
    """Read through a library (urllib, cyclopts) rather than by name in our code: the test
    that matches the code's reads against this list does not look for it there."""


VARIABLES: tuple[EnvironmentVariable, ...] = (
    EnvironmentVariable(
        "TRIOPERATOR_<OPTION>",
        "Any option of `trioperator run`, e.g. `TRIOPERATOR_VERBOSE=true`, "
        "`TRIOPERATOR_NAMESPACE=ns1`, `TRIOPERATOR_LOG_FORMAT=json`: the option's long name in "
        "capitals with `-` as `_`. An option given on the command line wins. The other "
        "commands (`new`, `crd`, `rbac`, `freeze`, `resume`) read none of them, except "
        "`TRIOPERATOR_PEERING` for the peering of `freeze` and `resume`.",
        "trioperator.cli (cyclopts' `Env` configuration)",
        indirect=True,
    ),
    EnvironmentVariable(
        "KUBECONFIG",
        "The kubeconfig file(s) to log in with, separated by `:` and merged as kubectl does; "
        "unset: `~/.kube/config`.",
        "trioperator._client.config, trioperator._client.piggybacking",
    ),
    EnvironmentVariable(
        "HOME",
        "Where `~/.kube/config` is looked for when `KUBECONFIG` is unset.",
        "trioperator._client.config",
    ),
    EnvironmentVariable(
        "KUBERNETES_SERVICE_HOST",
        "Set by Kubernetes in every pod: with `KUBERNETES_SERVICE_PORT` and the mounted "
        "service-account token, the operator logs in as its service account.",
        "trioperator._client.config",
    ),
    EnvironmentVariable(
        "KUBERNETES_SERVICE_PORT",
        "The API server's port inside the cluster (see `KUBERNETES_SERVICE_HOST`).",
        "trioperator._client.config",
    ),
    EnvironmentVariable(
        "POD_ID",
        "This operator's identity in peering records and in its shard's Lease (set it to the "
        "pod's name through the downward API); unset: `user@host/time/random`. "
        "`--id` wins over it.",
        "trioperator._engine.peering",
    ),
    EnvironmentVariable(
        "POD_NAMESPACE",
        "The operator's own namespace (downward API): where the sharding ring's Leases live "
        "unless `settings.sharding.namespace` says otherwise, and the namespace of the "
        "webhook servers' Service and certificate Secret.",
        "trioperator._runtime.coordination.sharding, trioperator._kits.webhooks",
    ),
    EnvironmentVariable(
        "HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY",
        "Proxies to the API server (and hosts to reach directly), in either case, as Python's "
        "urllib reads them; only with `settings.networking.trust_env = True` (or "
        "`ConnectionInfo.trust_env`). A kubeconfig's `proxy-url` wins.",
        "trioperator._client.http (through urllib.request)",
        indirect=True,
    ),
    EnvironmentVariable(
        "NETRC",
        "The netrc file with a proxy's user and password (default `~/.netrc`); only with "
        "`trust_env` and for a proxy URL that names no user.",
        "trioperator._client.http",
    ),
    EnvironmentVariable(
        "KUBEBUILDER_ASSETS",
        "Test kit: the directory with `etcd`, `kube-apiserver` and `kubectl` for "
        "`trioperator.testing.RealControlPlane` (envtest's convention, as `setup-envtest use "
        "-p path` prints it); unset: the binaries `scripts/kube-up` builds.",
        "trioperator.testing.controlplane",
    ),
    EnvironmentVariable(
        "TRIOPERATOR_KUBE_CACHE",
        "Test kit: where `scripts/kube-up` keeps the binaries it builds (default "
        "`$XDG_CACHE_HOME/trioperator/kube`); their `bin/` is used when `KUBEBUILDER_ASSETS` "
        "is unset.",
        "trioperator.testing.controlplane",
    ),
    EnvironmentVariable(
        "XDG_CACHE_HOME",
        "Test kit: the cache directory under which `trioperator/kube` is looked for "
        "(default `~/.cache`).",
        "trioperator.testing.controlplane",
    ),
)
