"""The command line: ``trioperator run [FILES...] [-m MODULE...] [options]``, and
``trioperator freeze``/``resume`` to pause and resume the operators of a peering by hand, and
``trioperator rbac`` (the RBAC manifests the same handlers need), and ``trioperator crd``
(the CustomResourceDefinitions of the typed resources' models, docs/typed-resources.md), and
``trioperator new NAME`` (a new operator project, trioperator/_kits/scaffold.py).

Options follow Kopf's (``kopf run``); every option of ``run`` can also come from an environment
variable ``TRIOPERATOR_<OPTION>`` (e.g. ``TRIOPERATOR_VERBOSE=true``), and the peering of
``freeze``/``resume`` from ``TRIOPERATOR_PEERING``. Wrong or conflicting options are
reported as usage errors (exit code 2) before anything connects to the cluster.
"""

from __future__ import annotations

import contextvars
import dataclasses
import gc
import logging
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Literal, TypeAlias

import cyclopts
import trio
import yaml
from cyclopts import App, Parameter

from trioperator._client.api import APIClient
from trioperator._client.config import (
    ConfigError,
    kubeconfig_exists,
    load_kubeconfig,
    load_service_account,
    login_with_kubeconfig,
    login_with_service_account,
)
from trioperator._client.credentials import LoginError, Vault
from trioperator._client.discovery import scan_resources
from trioperator._client.errors import APIConnectionError, APIError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings
from trioperator._engine.builtin_resources import BUILTIN_RESOURCES, resources_from_crd
from trioperator._engine.crd_schema import SchemaError, crd_manifests
from trioperator._engine.flavors import FlavorSetting
from trioperator._engine.models import declared_models, model_of
from trioperator._engine.namespaces import parse_namespace_options
from trioperator._engine.peering import DEV_PRIORITY, detect_own_id
from trioperator._engine.rbac import RBACError, build_manifests, required_permissions
from trioperator._engine.registry import (
    OperatorRegistry,
    get_default_registry,
)
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.freezing import PeeringCommandError, Touched, touch_peerings
from trioperator._runtime.program.loading import OperatorCodeError, load_operator_code
from trioperator._runtime.program.logsetup import CHATTY_LOGGERS, configure
from trioperator._runtime.program.operator import Operator, check_endpoints
from trioperator._runtime.program.options import OperatorOptions
from trioperator._util.endpoints import parse_endpoint
from trioperator._version import __version__

app = App(
    name="trioperator",
    help="Kubernetes operators on trio, Kopf-compatible.",
    version=__version__,
)

RUN_ENVIRONMENT = cyclopts.config.Env("TRIOPERATOR_", command=False)
"""Every option of ``run`` (only) also comes from ``TRIOPERATOR_<OPTION>``: an operator's
container is configured that way. The other commands are run by hand, where a variable left in
the shell (``TRIOPERATOR_FORCE``, or an operator's ``TRIOPERATOR_ID``/``TRIOPERATOR_PRIORITY``
in its pod) must not change what they do unseen; ``freeze``/``resume`` read only
``TRIOPERATOR_PEERING``, the operator's peering."""

LogFormat = Literal["full", "plain", "json"]

# The spelling of the options that several commands share, written once.
Switch: TypeAlias = Annotated[bool, Parameter(negative="")]
"""An on/off flag without a ``--no-`` form."""
Modules: TypeAlias = Annotated[list[str] | None, Parameter(name=["-m", "--module"])]
Namespaces: TypeAlias = Annotated[list[str] | None, Parameter(name=["-n", "--namespace"])]
AllNamespaces: TypeAlias = Annotated[bool, Parameter(name=["-A", "--all-namespaces"], negative="")]
Verbose: TypeAlias = Annotated[bool, Parameter(name=["-v", "--verbose"], negative="")]
Debug: TypeAlias = Annotated[bool, Parameter(name=["-d", "--debug"], negative="")]
Quiet: TypeAlias = Annotated[bool, Parameter(name=["-q", "--quiet"], negative="")]
Identity: TypeAlias = Annotated[str | None, Parameter(name=["-i", "--id"])]

FREEZE_PRIORITY = 100
"""Kopf's default priority of a freeze: above every operator that runs without --priority."""


class UsageError(Exception):
    """A problem with the command line or the files it names; exit code 2."""


@dataclasses.dataclass
class CLIControls:
    """What an in-process runner (``trioperator.testing.KopfRunner``) passes to ``main``
    besides the command line, like Kopf's ``CLIControls``.

    ``started`` is called inside the operator's trio run, just before ``Operator.main``: a
    runner in another thread keeps ``trio.lowlevel.current_trio_token()`` there, to stop the
    operator later with ``trio.from_thread.run_sync(operator.stop, trio_token=token)``.
    """

    registry: OperatorRegistry | None = None
    """Serve these handlers; the files and modules of the command line register into it."""
    settings: OperatorSettings | None = None
    vault: Vault | None = None
    handle_signals: bool = True
    """Only the main thread can handle signals: runners in other threads turn this off."""
    started: Callable[[Operator], object] | None = None
    exception: BaseException | None = None
    """Set by ``main`` to the error behind a non-zero exit code."""


_CONTROLS: contextvars.ContextVar[CLIControls | None] = contextvars.ContextVar(
    "trioperator_cli_controls", default=None
)


@app.command(config=RUN_ENVIRONMENT)
def run(
    paths: list[str] | None = None,
    /,
    *,
    module: Modules = None,
    namespace: Namespaces = None,
    all_namespaces: AllNamespaces = False,
    standalone: Switch = False,
    peering: Annotated[str | None, Parameter(name=["--peering", "-P"])] = None,
    priority: Annotated[int | None, Parameter(name=["--priority", "-p"])] = None,
    dev: Switch = False,
    liveness: Annotated[str | None, Parameter(name=["-L", "--liveness"])] = None,
    metrics: str | None = None,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
    log_format: LogFormat = "full",
    log_prefix: Annotated[bool | None, Parameter(name="--log-prefix")] = None,
    log_refkey: str = "object",
    async_flavor: FlavorSetting | None = None,
    id: Annotated[str | None, Parameter(name=["--id"])] = None,
    shards: Literal["auto", "off"] | None = None,
    shard_ring: str | None = None,
    shard_mode: Literal["filter", "labels"] | None = None,
) -> int:
    """Run an operator: import the files and modules with its handlers, then serve them.

    Parameters
    ----------
    paths
        Python files with handlers, imported in order.
    module
        Python modules with handlers (importable from the current directory).
    namespace
        Serve the namespaces matching this pattern (repeatable): a name, or comma-separated
        globs with * and ?, where !glob excludes (e.g. 'myapp-*,!*-pr-*'); a leading exclusion
        implies a * before it. Namespaces created later are served as they appear.
    all_namespaces
        Serve the whole cluster (the default when no namespace is given).
    standalone
        Do not peer with other operators: no keep-alives, never paused by a peer. Without it
        (and without --peering), the peering object "default" is used if it exists.
    peering
        The peering object to use (KopfPeering in each served namespace, or ClusterKopfPeering
        with --all-namespaces); mandatory: the operator is paused until it exists.
    priority
        This operator's priority among its peers (default 0): an operator pauses while a peer
        with a higher priority is alive; peers with the same priority all pause, with a warning.
    dev
        Development mode: priority 666, so that this operator pauses the deployed ones.
    liveness
        Serve the liveness probe at this URL, e.g. http://0.0.0.0:8080/healthz (http only).
    metrics
        Serve Prometheus metrics at this URL, e.g. http://0.0.0.0:9090/metrics (http only);
        with the host and port of --liveness, on the liveness server.
    verbose
        Log at DEBUG level.
    debug
        Log at DEBUG level, including the HTTP library.
    quiet
        Log only warnings and errors.
    log_format
        full (timestamps, logger names, levels), plain (messages only), or json.
    log_prefix
        Prefix object-related messages with [namespace/name] (default: on, except for json).
    log_refkey
        The JSON key holding the object reference in json logs.
    async_flavor
        The library async handlers are written for: trio, asyncio (run on an asyncio loop on
        top of trio), or auto (default): asyncio for handlers whose module imports asyncio or
        an asyncio-only library (aiohttp, kubernetes_asyncio, ...), trio for the rest. A
        handler's own flavor= option wins. Sets settings.execution.async_flavor.
    id
        This operator's identity (peering records, the shard's Lease); default: the POD_ID
        variable, else user@host/time/random.
    shards
        auto: share the objects with the other replicas of the same ring (each renews its own
        Lease; objects are spread over the live ones by consistent hashing; see
        docs/sharding.md). off (default): this replica serves every object.
        Sets settings.sharding.enabled.
    shard_ring
        The ring's name (default "default"): replicas with the same name share the objects.
        Sets settings.sharding.ring.
    shard_mode
        filter (default): every replica watches every object and keeps its share. labels:
        objects are labelled with a bucket once, and each replica watches only its buckets,
        so the watch traffic divides by the replicas (docs/sharding.md).
        Sets settings.sharding.mode.
    """
    namespaces = _namespaces(namespace, all_namespaces=all_namespaces)
    _check_run_options(
        standalone=standalone,
        peering=peering,
        shards=shards,
        shard_ring=shard_ring,
        shard_mode=shard_mode,
        id=id,
        liveness=liveness,
        metrics=metrics,
    )
    configure(
        verbose=verbose,
        debug=debug,
        quiet=quiet,
        log_format=log_format,
        log_prefix=log_prefix,
        log_refkey=log_refkey,
    )
    controls = _CONTROLS.get() or CLIControls()
    registry = controls.registry if controls.registry is not None else get_default_registry()
    # The decorators of the loaded code register into the default registry: while loading,
    # that is the registry to serve (load() sees to it).
    load(paths or [], module or [], registry=registry)
    options = OperatorOptions(
        registry=registry,
        settings=_run_settings(
            controls, shards=shards, shard_ring=shard_ring, shard_mode=shard_mode
        ),
        vault=controls.vault,
        namespaces=namespaces,
        clusterwide=not namespaces,
        handle_signals=controls.handle_signals,
        liveness_endpoint=liveness,
        metrics_endpoint=metrics,
        standalone=True if standalone else None,
        # As in Kopf, --dev wins over --priority.
        priority=DEV_PRIORITY if dev else priority,
        peering_name=peering,
        async_flavor=async_flavor,
        identity=id,
    )
    _tune_gc()
    trio.run(_run_operator, Operator.from_options(options), controls.started)
    return 0


def _check_run_options(
    *,
    standalone: bool,
    peering: str | None,
    shards: Literal["auto", "off"] | None,
    shard_ring: str | None,
    shard_mode: Literal["filter", "labels"] | None,
    id: str | None,
    liveness: str | None,
    metrics: str | None,
) -> None:
    """Refuse options that cannot work together (``UsageError``), before anything is loaded."""
    if standalone and peering is not None:
        # Kopf accepts this and then pauses forever (a mandatory peering it never looks for).
        raise UsageError("Either --standalone or --peering, not both.")
    if peering is not None and not peering.strip():
        raise UsageError("--peering needs the name of a peering object.")
    if shard_ring is not None and not shard_ring.strip():
        raise UsageError("--shard-ring needs a name.")
    if shard_ring is not None and shards != "auto":
        raise UsageError("--shard-ring needs --shards auto.")
    if shard_mode is not None and shards != "auto":
        raise UsageError("--shard-mode needs --shards auto.")
    if id is not None and not id.strip():
        raise UsageError("--id needs a value.")
    if liveness is not None:
        try:
            parse_endpoint(liveness)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if metrics is not None:
        try:
            check_endpoints(liveness, metrics)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _run_settings(
    controls: CLIControls,
    *,
    shards: Literal["auto", "off"] | None,
    shard_ring: str | None,
    shard_mode: Literal["filter", "labels"] | None,
) -> OperatorSettings:
    """The operator's settings: the runner's, or new ones; the sharding options written in."""
    settings = controls.settings if controls.settings is not None else OperatorSettings()
    if shards is not None:
        settings.sharding.enabled = shards == "auto"
    if shard_ring is not None:
        settings.sharding.ring = shard_ring
    if shard_mode is not None:
        settings.sharding.mode = shard_mode
    return settings


GC_THRESHOLDS = (10_000, 50, 10)
"""The collector's thresholds while an operator runs (Python's default: 700, 10, 10)."""


def _tune_gc() -> None:
    """Make the cyclic garbage collector cheaper for a process that is an operator.

    Each watch event and each handled object allocates a few dozen containers that mostly die
    by reference counting, while a few (the objects' bodies, memories, tasks) live on: with
    Python's default thresholds, a burst of objects spends a good share of its CPU in collections
    (figures: benchmarks/README.md),
    most of it re-scanning the same survivors and, in full collections, every module, class
    and function imported so far. Frozen, those imports are never scanned again (they are
    still freed as usual when unreferenced); larger young generations let more of the
    short-lived containers die before a collection sees them. Only for ``run`` (the process
    is ours); an embedded operator leaves its host's collector as it is.
    """
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()


@app.command
def freeze(
    *,
    peering: Annotated[str, Parameter(name=["--peering", "-P"], env_var="TRIOPERATOR_PEERING")],
    lifetime: Annotated[int, Parameter(name=["--lifetime", "-t"])],
    namespace: Namespaces = None,
    all_namespaces: AllNamespaces = False,
    id: Identity = None,
    priority: Annotated[int, Parameter(name=["--priority", "-p"])] = FREEZE_PRIORITY,
    dev: Switch = False,
    message: Annotated[str | None, Parameter(name=["-m", "--message"])] = None,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> int:
    """Pause the operators of a peering (Kopf's or trioperator's) for a while.

    Writes a peer record with a high priority into the peering object(s): every operator with
    a lower priority pauses until the record expires or `resume` removes it.

    Parameters
    ----------
    peering
        The peering object: ClusterKopfPeering with --all-namespaces, else KopfPeering in each
        namespace.
    lifetime
        Seconds until the freeze expires by itself.
    namespace
        Freeze in the namespaces matching this pattern (repeatable; globs as for `run`).
    all_namespaces
        Freeze cluster-wide (the default when no namespace is given).
    id
        The identity of the record (default: user@host, as `resume` from here uses too).
    priority
        The freeze's priority: operators with a lower one pause.
    dev
        Priority 666, as `run --dev` has.
    message
        Why: logged here (Kopf's peering records have no place for it).
    verbose
        Log at DEBUG level.
    debug
        Log at DEBUG level, including the HTTP library.
    quiet
        Log only warnings and errors.
    """
    if lifetime <= 0:
        raise UsageError("--lifetime must be a positive number of seconds (`resume` unfreezes).")
    _command_logging(verbose=verbose, debug=debug, quiet=quiet)
    return _peering_command(
        "freeze",
        peering=peering,
        namespace=namespace,
        all_namespaces=all_namespaces,
        id=id,
        priority=DEV_PRIORITY if dev else priority,
        lifetime=lifetime,
        message=message,
    )


@app.command
def resume(
    *,
    peering: Annotated[str, Parameter(name=["--peering", "-P"], env_var="TRIOPERATOR_PEERING")],
    namespace: Namespaces = None,
    all_namespaces: AllNamespaces = False,
    id: Identity = None,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> int:
    """Lift a freeze: remove the record that `freeze` wrote (from here, or with the same --id).

    Parameters
    ----------
    peering
        The peering object that was frozen.
    namespace
        Resume in the namespaces matching this pattern (repeatable).
    all_namespaces
        Resume cluster-wide (the default when no namespace is given).
    id
        The identity the freeze used (default: user@host).
    verbose
        Log at DEBUG level.
    debug
        Log at DEBUG level, including the HTTP library.
    quiet
        Log only warnings and errors.
    """
    _command_logging(verbose=verbose, debug=debug, quiet=quiet)
    return _peering_command(
        "resume",
        peering=peering,
        namespace=namespace,
        all_namespaces=all_namespaces,
        id=id,
        priority=0,
        lifetime=0,
        message=None,
    )


def _peering_command(
    command: str,
    *,
    peering: str,
    namespace: list[str] | None,
    all_namespaces: bool,
    id: str | None,
    priority: int,
    lifetime: int,
    message: str | None,
) -> int:
    namespaces = _namespaces(namespace, all_namespaces=all_namespaces)
    if not peering.strip():
        raise UsageError("--peering needs the name of a peering object.")
    if id is not None and not id.strip():
        raise UsageError("--id needs a non-empty identity.")
    name = peering.strip()
    identity = id.strip() if id is not None else detect_own_id(manual=True)
    log = logging.getLogger("trioperator")
    controls = _CONTROLS.get() or CLIControls()
    try:
        vault = controls.vault if controls.vault is not None else _login_vault()
    except ConfigError as exc:
        log.error(f"Cannot {command}: {exc}")
        return 1
    if vault is None:
        log.error("No credentials: neither a kubeconfig nor an in-cluster service account.")
        return 1
    try:
        touched = trio.run(
            partial(
                _touch,
                vault,
                name=name,
                identity=identity,
                priority=priority,
                lifetime=lifetime,
                clusterwide=not namespaces,
                namespaces=namespaces,
            )
        )
    except (PeeringCommandError, APIError, APIConnectionError, LoginError) as exc:
        log.error(f"Cannot {command}: {exc}")
        return 1
    done = "Frozen" if command == "freeze" else "Resumed"
    how = f" for {lifetime}s with priority {priority}" if command == "freeze" else ""
    why = f": {message}" if message else "."
    # One line per place, though the record may have gone to both API groups' objects there.
    found = {item.where for item in touched if item.found}
    for where in dict.fromkeys(item.where for item in touched):
        if where in found:
            log.info(f"{done} {name!r} {where}{how} as {identity!r}{why}")
        else:
            log.warning(f"The peering object {name!r} does not exist {where}: skipped.")
    return 0


def _namespaces(namespace: list[str] | None, *, all_namespaces: bool) -> list[str]:
    """The patterns of the -n options (each value is one pattern: commas inside it are part of
    Kopf's glob syntax), none for the whole cluster; -A with -n is an error."""
    namespaces = list(parse_namespace_options(namespace or []))
    if namespaces and all_namespaces:
        raise UsageError("Either --namespace or --all-namespaces, not both.")
    return namespaces


def _command_logging(*, verbose: bool, debug: bool, quiet: bool) -> None:
    # A one-shot command says a few lines: the operator's log formats are not needed here.
    level = logging.DEBUG if (verbose or debug) else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="[%(asctime)s] %(levelname)-8s %(message)s", force=True)
    # Libraries that log every request at INFO: only --debug wants that.
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)


def _login_vault() -> Vault | None:
    infos = {
        fn.__name__: info
        for fn in (login_with_service_account, login_with_kubeconfig)
        if (info := fn()) is not None
    }
    return Vault(infos) if infos else None


async def _touch(
    vault: Vault,
    *,
    name: str,
    identity: str,
    priority: int,
    lifetime: int,
    clusterwide: bool,
    namespaces: list[str],
) -> list[Touched]:
    async with APIClient(vault, NetworkingSettings()) as api:
        return await touch_peerings(
            api,
            name=name,
            identity=identity,
            priority=priority,
            lifetime=lifetime,
            clusterwide=clusterwide,
            namespaces=namespaces,
        )


@app.command
def rbac(
    paths: list[str] | None = None,
    /,
    *,
    module: Modules = None,
    namespace: Namespaces = None,
    all_namespaces: AllNamespaces = False,
    crd: Annotated[list[str] | None, Parameter(name="--crd")] = None,
    discover: Switch = False,
    standalone: Switch = False,
    shards: Literal["auto", "off"] = "off",
    shard_namespace: str | None = None,
    managed_webhooks: bool = True,
    webhook_ca_secret: str | None = None,
    webhook_ca_namespace: str | None = None,
    service_account: str = "trioperator",
    service_account_namespace: str | None = None,
    name: str = "trioperator",
) -> int:
    """Print the least-privilege RBAC manifests the operator's handlers need (YAML).

    The ClusterRole (and, with -n, a Role in each namespace) holds exactly what trioperator
    requests for the registered handlers; each is bound to the service account. Rules for
    what the handlers themselves do (e.g. create children) must be added by hand.

    Parameters
    ----------
    paths
        Python files with handlers, imported in order (as by ``trioperator run``).
    module
        Python modules with handlers.
    namespace
        A namespace the operator will serve (repeatable; names only, no globs): a Role each.
    all_namespaces
        The operator will serve the whole cluster (the default): one ClusterRole.
    crd
        YAML files with the CustomResourceDefinitions the handlers use (repeatable); built-in
        Kubernetes resources are known without.
    discover
        Ask the cluster (the kubeconfig, or the pod's service account) which resources it
        serves, instead of (or besides) --crd files.
    standalone
        The operator will run with --standalone: no peering rules.
    shards
        The operator will run with --shards auto: rules on the ring's Leases.
    shard_namespace
        The namespace of the ring's Leases (default: the service account's namespace).
    managed_webhooks
        Rules to manage the admission webhook configurations (when there are admission
        handlers; turn off unless settings.admission.managed is set).
    webhook_ca_secret
        The Secret where the webhook server keeps the CA its replicas share
        (WebhookServiceServer's ca_secret, by default "<Service name>-ca"): reading it and
        creating secrets (when there are admission handlers).
    webhook_ca_namespace
        The namespace of that Secret (default: the service account's namespace).
    service_account
        The name of the ServiceAccount to bind the roles to.
    service_account_namespace
        Its namespace (default: the first -n namespace, else "default").
    name
        The name of the ClusterRole, the Roles and the bindings.
    """
    namespaces = _namespaces(namespace, all_namespaces=all_namespaces)
    known: set[Resource] = set(BUILTIN_RESOURCES)
    for path in crd or []:
        known.update(_read_crds(path))
    if discover:
        known.update(trio.run(_discover_resources))
    registry = OperatorRegistry()
    load(paths or [], module or [], registry=registry)
    settings = OperatorSettings()
    settings.peering.standalone = standalone
    settings.peering.clusterwide = not namespaces
    settings.sharding.enabled = shards == "auto"
    settings.sharding.namespace = shard_namespace
    settings.admission.managed = name if managed_webhooks else None
    try:
        permissions = required_permissions(
            registry,
            settings,
            known,
            namespaces=namespaces,
            webhook_ca_secret=webhook_ca_secret,
            webhook_ca_namespace=webhook_ca_namespace,
        )
    except RBACError as exc:
        raise UsageError(str(exc)) from None
    objects = build_manifests(
        permissions,
        name=name,
        service_account=service_account,
        service_account_namespace=service_account_namespace
        or (str(namespaces[0]) if namespaces else "default"),
    )
    sources = " ".join([*(paths or []), *(f"-m {m}" for m in module or [])])
    print(f"# Generated by `trioperator rbac` for {sources}: what trioperator requests itself.")
    print("# Add the rules for what the handlers do on their own (e.g. creating children).")
    print(
        yaml.dump_all(objects, Dumper=_ManifestDumper, sort_keys=False, explicit_start=True), end=""
    )
    return 0


@app.command
def crd(
    paths: list[str] | None = None,
    /,
    *,
    module: Modules = None,
) -> int:
    """Print the CustomResourceDefinitions of the resource models in the operator's code (YAML).

    Every msgspec Struct marked with ``trioperator.typed.resource`` that the files and modules
    declare becomes a CRD (apiextensions.k8s.io/v1) with a structural OpenAPI v3 schema, its
    subresources and printer columns; the models of several versions of one resource become
    the versions of one CRD. Apply the output with ``kubectl apply -f -``.

    Parameters
    ----------
    paths
        Python files with models (and handlers), imported in order (as by ``trioperator run``).
    module
        Python modules with models.
    """
    if not paths and not module:
        raise UsageError("Name Python files or modules (-m) with resource models.")
    before = len(declared_models())
    try:
        load_operator_code(paths or [], module or [], registry=OperatorRegistry())
    except OperatorCodeError as exc:
        raise UsageError(str(exc)) from None
    models = declared_models()[before:]
    # A module imported before (e.g. by a test) declares nothing anew: look into it instead.
    for name in module or []:
        loaded = sys.modules.get(name)
        for value in vars(loaded).values() if loaded is not None else ():
            if model_of(value) is not None and value not in models:
                models.append(value)
    if not models:
        raise UsageError("No resource models (trioperator.typed.resource) in the given code.")
    try:
        manifests = crd_manifests(models)
    except SchemaError as exc:
        raise UsageError(f"Cannot generate a CRD: {exc}") from None
    sources = " ".join([*(paths or []), *(f"-m {m}" for m in module or [])])
    print(f"# Generated by `trioperator crd {sources}` from the resource models; do not edit.")
    print(
        yaml.dump_all(
            manifests, Dumper=_ManifestDumper, sort_keys=False, explicit_start=True, width=100
        ),
        end="",
    )
    return 0


@app.command
def new(
    name: str,
    /,
    *,
    dir: Annotated[str, Parameter(name="--dir")] = ".",
    group: str | None = None,
    kind: str | None = None,
    typed: Annotated[bool, Parameter(negative="--yaml")] = True,
    force: Switch = False,
) -> int:
    """Write a new operator project NAME: handlers, a CRD, tests, a Containerfile, manifests.

    The project (``DIR/NAME``) holds the package NAME (with "-" as "_") with the operator
    module, the CRD, tests on the fake API that pass as generated, manifests with RBAC generated
    by ``trioperator rbac``, a Containerfile, a README and a Justfile.

    Parameters
    ----------
    name
        The project's name: lowercase letters, digits and "-" (it names the Python package,
        the namespace, the service account and the image).
    dir
        The directory to make the project in.
    group
        The API group of the custom resource (default: NAME.example.com).
    kind
        The custom resource's kind, in CamelCase (default: from NAME, e.g. my-app: MyApp).
    typed
        Declare the resource as msgspec models and generate its CRD with ``trioperator crd``
        (the default), or write the CRD as YAML (--yaml) and handle plain dicts.
    force
        Overwrite the project's files if they exist (other files are left alone).
    """
    from trioperator._kits.scaffold import ProjectOptions, ScaffoldError, write_project

    options = ProjectOptions(
        name=name, directory=Path(dir), group=group, kind=kind, typed=typed, force=force
    )
    try:
        target = write_project(options)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    print(f"Created the project {name} in {target}. Next:")
    print(f"  cd {target} && pip install -e '.[test]' && pytest")
    return 0


DISCOVERY_TIMEOUT = 60.0
"""Seconds for ``rbac --discover`` to read the cluster's discovery documents."""


async def _discover_resources() -> list[Resource]:
    """The resources the cluster serves, with the credentials ``trioperator run`` would find
    first without login handlers: the kubeconfig, else the pod's service account."""
    try:
        info = load_kubeconfig() if kubeconfig_exists() else load_service_account()
        if info is None:
            raise UsageError("--discover: no kubeconfig and no in-cluster service account.")
        settings = NetworkingSettings(error_backoffs=())  # fail fast: a person is waiting
        with trio.fail_after(DISCOVERY_TIMEOUT):
            async with APIClient(Vault({"rbac": info}), settings) as api:
                return await scan_resources(api)
    except (ConfigError, APIError, APIConnectionError, LoginError, trio.TooSlowError) as exc:
        raise UsageError(f"--discover: cannot read the cluster's resources: {exc!r}") from None


class _ManifestDumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML has no stubs here
    """Lists of plain strings in flow style (``verbs: [list, watch]``), as manifests are written."""

    def represent_list(self, data: list[object]) -> yaml.Node:
        flow = all(isinstance(item, str) for item in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_ManifestDumper.add_representer(list, _ManifestDumper.represent_list)


def _read_crds(path: str) -> list[Resource]:
    try:
        with open(path, encoding="utf-8") as file:
            documents = [doc for doc in yaml.safe_load_all(file) if doc]
    except OSError as exc:
        raise UsageError(f"Cannot read --crd {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--crd {path} is not valid YAML: {exc}") from None
    resources: list[Resource] = []
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue  # other objects in the same file (e.g. a whole manifest set)
        try:
            resources.extend(resources_from_crd(doc))
        except ValueError as exc:
            raise UsageError(f"--crd {path}: {exc}") from None
    if not resources:
        raise UsageError(f"--crd {path} holds no CustomResourceDefinition.")
    return resources


async def _run_operator(operator: Operator, started: Callable[[Operator], object] | None) -> None:
    if started is not None:
        started(operator)
    await operator.main()


def load(paths: list[str], modules: list[str], *, registry: OperatorRegistry) -> None:
    """Import the operator's code into ``registry``, with clear errors for what cannot load."""
    if not paths and not modules:
        raise UsageError("Nothing to run: name Python files or modules (-m) with handlers.")
    try:
        load_operator_code(paths, modules, registry=registry)
    except OperatorCodeError as exc:
        raise UsageError(str(exc)) from None
    if not len(registry):
        raise UsageError("No handlers were registered by the given files and modules.")


def main(argv: list[str] | None = None, *, controls: CLIControls | None = None) -> int:
    """The console entry point; returns the process exit code.

    ``controls`` come from in-process runners (``trioperator.testing.KopfRunner``); the error
    behind a non-zero exit code is left in ``controls.exception``.
    """
    controls = controls if controls is not None else CLIControls()
    reset = _CONTROLS.set(controls)
    try:
        # The exit code is returned (not raised as SystemExit), for in-process callers too.
        result = app(argv, exit_on_error=False, print_error=True, result_action="return_value")
    except UsageError as exc:
        controls.exception = exc
        print(f"Usage error: {exc}", file=sys.stderr)
        return 2
    except cyclopts.CycloptsError as exc:
        controls.exception = exc
        return 2
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        controls.exception = exc
        logging.getLogger("trioperator").critical(f"The operator has failed: {exc!r}", exc_info=exc)
        return 1
    finally:
        _CONTROLS.reset(reset)
    return result if isinstance(result, int) else 0
