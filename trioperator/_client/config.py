"""Connection info from a kubeconfig file or from the in-cluster service account.

These are the two sources of credentials trioperator understands on its own. Both produce a
``ConnectionInfo``; anything fancier (exec plugins, cloud auth providers, token exchange) is
for an ``@on.login`` handler. A missing source is not an error (the login functions return
``None``), but a present and broken one is: ``ConfigError`` names the file and the problem,
because a silently ignored kubeconfig ends up as a baffling "401 Unauthorized" much later.

Kubeconfig merging follows kubectl: ``$KUBECONFIG`` lists files separated by ``os.pathsep``
(missing ones are skipped); the first file that sets ``current-context`` wins, and every
named cluster/user/context is taken from the first file that defines that name. Relative
paths inside a file are relative to that file's directory.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import yaml

from trioperator._client.credentials import ConnectionInfo

DEFAULT_SERVICE_ACCOUNT_ROOT = "/var/run/secrets/kubernetes.io/serviceaccount"


class ConfigError(Exception):
    """A kubeconfig or the service-account mount exists but cannot be used."""


# ------------------------------------------------------------------------------ kubeconfig


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One named cluster/user/context, with the file it came from."""

    name: str
    body: Mapping[str, object]
    source: str


@dataclasses.dataclass(frozen=True)
class _Merged:
    files: list[str]
    current_context: str | None
    contexts: dict[str, _Entry]
    clusters: dict[str, _Entry]
    users: dict[str, _Entry]


def load_kubeconfig(
    path: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ConnectionInfo:
    """Read a kubeconfig (merged from ``$KUBECONFIG`` or ``~/.kube/config`` if no ``path``)."""
    env = os.environ if environ is None else environ
    merged = _merge([(name, _read_yaml_mapping(name)) for name in _locate(path, env)])
    files = ", ".join(merged.files)

    ctx_name = context or merged.current_context
    if not ctx_name:
        raise ConfigError(f"No context is selected: current-context is not set in {files}.")
    ctx = merged.contexts.get(ctx_name)
    if ctx is None:
        raise ConfigError(f"Context {ctx_name!r} is not defined in {files}.")
    ctx_where = f"context {ctx_name!r} in {ctx.source}"

    cluster_name = _opt_str(ctx.body, "cluster", ctx_where)
    if not cluster_name:
        raise ConfigError(f"The {ctx_where} names no cluster.")
    cluster = merged.clusters.get(cluster_name)
    if cluster is None:
        raise ConfigError(
            f"Cluster {cluster_name!r} (of the {ctx_where}) is not defined in {files}."
        )

    user_name = _opt_str(ctx.body, "user", ctx_where)
    user: _Entry | None = None
    if user_name:
        user = merged.users.get(user_name)
        if user is None:
            raise ConfigError(f"User {user_name!r} (of the {ctx_where}) is not defined in {files}.")

    fields: dict[str, Any] = {}
    fields.update(_cluster_fields(cluster))
    if user is not None:
        fields.update(_user_fields(user))
    namespace = _opt_str(ctx.body, "namespace", ctx_where)
    return ConnectionInfo(default_namespace=namespace or None, **fields)


def kubeconfig_exists(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a kubeconfig is configured at all: ``$KUBECONFIG`` is set or the default exists."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBECONFIG", "").strip()) or os.path.exists(_default_path(env))


def _default_path(env: Mapping[str, str]) -> str:
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".kube", "config")


def _locate(path: str | None, env: Mapping[str, str]) -> list[str]:
    """The kubeconfig files to merge, in precedence order; all of them exist."""
    if path is not None:
        explicit = os.path.expanduser(path)
        if not os.path.exists(explicit):
            raise ConfigError(f"The kubeconfig file {explicit} does not exist.")
        return [explicit]

    listed = env.get("KUBECONFIG", "")
    if listed.strip():
        candidates = [os.path.expanduser(p.strip()) for p in listed.split(os.pathsep) if p.strip()]
        existing = list(dict.fromkeys(p for p in candidates if os.path.exists(p)))
        if not existing:
            listed_files = ", ".join(candidates)
            raise ConfigError(f"No file listed in $KUBECONFIG exists: {listed_files}.")
        return existing

    default = _default_path(env)
    if not os.path.exists(default):
        raise ConfigError(f"No kubeconfig: $KUBECONFIG is not set and {default} does not exist.")
    return [default]


def _read_yaml_mapping(path: str) -> Mapping[str, object]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"Cannot read the kubeconfig {path}: {_reason(e)}.") from e
    try:
        doc: object = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"The kubeconfig {path} is not valid YAML: {_yaml_problem(e)}.") from e
    if doc is None:  # an empty file is an empty config, as for kubectl
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(
            f"The kubeconfig {path} must be a YAML mapping, not {type(doc).__name__}."
        )
    return doc


def _merge(docs: list[tuple[str, Mapping[str, object]]]) -> _Merged:
    current: str | None = None
    sections: dict[str, dict[str, _Entry]] = {"contexts": {}, "clusters": {}, "users": {}}
    for path, doc in docs:
        if current is None:
            current = _opt_str(doc, "current-context", f"the kubeconfig {path}") or None
        for section, entries in sections.items():
            for entry in _entries(doc, section, path):
                entries.setdefault(entry.name, entry)
    return _Merged(
        files=[path for path, _ in docs],
        current_context=current,
        contexts=sections["contexts"],
        clusters=sections["clusters"],
        users=sections["users"],
    )


def _entries(doc: Mapping[str, object], section: str, path: str) -> list[_Entry]:
    """Parse ``clusters:``/``users:``/``contexts:`` lists of ``{name: ..., <singular>: {...}}``."""
    raw = doc.get(section)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"In the kubeconfig {path}, {section!r} must be a list.")
    singular = section[:-1]
    result = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(
                f"In the kubeconfig {path}, {section}[{index}] must be a mapping with a name."
            )
        body = item.get(singular)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise ConfigError(
                f"In the kubeconfig {path}, {singular} {item['name']!r} must be a mapping."
            )
        result.append(_Entry(name=item["name"], body=body, source=path))
    return result


def _cluster_fields(cluster: _Entry) -> dict[str, Any]:
    where = f"cluster {cluster.name!r} in {cluster.source}"
    body = cluster.body
    server = _opt_str(body, "server", where)
    if not server:
        raise ConfigError(f"The {where} has no server.")
    insecure = body.get("insecure-skip-tls-verify")
    if insecure is not None and not isinstance(insecure, bool):
        raise ConfigError(f"In the {where}, insecure-skip-tls-verify must be true or false.")
    ca_data, ca_path = _data_or_path(cluster, "certificate-authority", "CA certificate", where)
    return {
        "server": server,
        "ca_data": ca_data,
        "ca_path": ca_path,
        "insecure": insecure,
        "proxy_url": _opt_str(body, "proxy-url", where) or None,
        "tls_server_name": _opt_str(body, "tls-server-name", where) or None,
    }


def _user_fields(user: _Entry) -> dict[str, Any]:
    where = f"user {user.name!r} in {user.source}"
    body = user.body

    token = _opt_str(body, "token", where) or None
    token_file = _opt_str(body, "tokenFile", where)
    if token_file:
        # Like client-go, the file wins over an inline token: it is what gets rotated.
        token_path = _resolve(token_file, user.source)
        token = _read_text(token_path, "token file", where).strip()
        if not token:
            raise ConfigError(f"The token file {token_path} of the {where} is empty.")

    cert_data, cert_path = _data_or_path(user, "client-certificate", "client certificate", where)
    key_data, key_path = _data_or_path(user, "client-key", "client key", where)
    has_cert = cert_data is not None or cert_path is not None
    has_key = key_data is not None or key_path is not None
    if has_cert != has_key:
        missing = "client key" if has_cert else "client certificate"
        raise ConfigError(
            f"The {where} has a client {'certificate' if has_cert else 'key'} but no {missing}."
        )

    username = _opt_str(body, "username", where) or None
    password = _opt_str(body, "password", where) or None

    if not token and not has_cert and not username:
        for plugin in ("exec", "auth-provider"):
            if body.get(plugin) is not None:
                raise ConfigError(
                    f"The {where} authenticates via {plugin!r}, which trioperator does not run. "
                    f"Give that user a token or a client certificate, or add an @on.login "
                    f"handler that obtains the credentials."
                )

    return {
        "scheme": "Bearer" if token else None,
        "token": token,
        "certificate_data": cert_data,
        "certificate_path": cert_path,
        "private_key_data": key_data,
        "private_key_path": key_path,
        "username": username,
        "password": password,
    }


def _data_or_path(
    entry: _Entry, field: str, what: str, where: str
) -> tuple[bytes | None, str | None]:
    """Read ``<field>-data`` (base64, wins as in kubectl) or ``<field>`` (a readable file)."""
    data = _opt_str(entry.body, f"{field}-data", where)
    if data:
        compact = "".join(data.split())  # tolerate wrapped base64
        try:
            return base64.b64decode(compact, validate=True), None
        except (binascii.Error, ValueError) as e:
            raise ConfigError(f"In the {where}, {field}-data is not valid base64: {e}.") from e
    path = _opt_str(entry.body, field, where)
    if path:
        resolved = _resolve(path, entry.source)
        _check_readable(resolved, what, where)
        return None, resolved
    return None, None


def _resolve(path: str, source: str) -> str:
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return expanded
    return os.path.join(os.path.dirname(os.path.abspath(source)), expanded)


def _opt_str(body: Mapping[str, object], key: str, where: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"In the {where}, {key} must be a string, not {type(value).__name__}.")
    return value


# ------------------------------------------------------------------------------ in-cluster


def load_service_account(
    *,
    root: str = DEFAULT_SERVICE_ACCOUNT_ROOT,
    environ: Mapping[str, str] | None = None,
) -> ConnectionInfo | None:
    """The pod's service account, or ``None`` when not running in a cluster.

    "In a cluster" means: ``KUBERNETES_SERVICE_HOST``/``_PORT`` are set and the token file is
    mounted. Then the CA certificate must be there too; the namespace file is optional.
    """
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = env.get("KUBERNETES_SERVICE_PORT", "").strip()
    token_path = os.path.join(root, "token")
    if not host or not port or not os.path.exists(token_path):
        return None

    where = "service account"
    if not port.isdigit():
        raise ConfigError(f"KUBERNETES_SERVICE_PORT is not a port number: {port!r}.")
    token = _read_text(token_path, "token file", where).strip()
    if not token:
        raise ConfigError(f"The service-account token file {token_path} is empty.")

    ca_path = os.path.join(root, "ca.crt")
    if not os.path.exists(ca_path):
        raise ConfigError(f"The service-account CA certificate {ca_path} does not exist.")
    _check_readable(ca_path, "CA certificate", where)

    ns_path = os.path.join(root, "namespace")
    namespace = None
    if os.path.exists(ns_path):
        namespace = _read_text(ns_path, "namespace file", where).strip() or None

    if ":" in host and not host.startswith("["):  # a bare IPv6 address
        host = f"[{host}]"
    return ConnectionInfo(
        server=f"https://{host}:{port}",
        ca_path=ca_path,
        scheme="Bearer",
        token=token,
        default_namespace=namespace,
    )


# ------------------------------------------------------------------------------ login functions


def login_with_kubeconfig(**kwargs: Any) -> ConnectionInfo | None:
    """A login handler: credentials from the kubeconfig, or ``None`` if there is none.

    Accepts (and ignores) the usual handler kwargs; honours ``settings.networking.trust_env``.
    """
    if not kubeconfig_exists():
        return None
    return _with_trust_env(load_kubeconfig(), kwargs)


def login_with_service_account(**kwargs: Any) -> ConnectionInfo | None:
    """A login handler: the pod's service account, or ``None`` outside of a cluster.

    Accepts (and ignores) the usual handler kwargs; honours ``settings.networking.trust_env``.
    """
    info = load_service_account()
    return None if info is None else _with_trust_env(info, kwargs)


def _with_trust_env(info: ConnectionInfo, kwargs: Mapping[str, Any]) -> ConnectionInfo:
    # Duck-typed: the operator settings live in a higher layer than this module.
    networking = getattr(kwargs.get("settings"), "networking", None)
    if getattr(networking, "trust_env", False) is True:
        return dataclasses.replace(info, trust_env=True)
    return info


# ------------------------------------------------------------------------------ files


def _check_readable(path: str, what: str, where: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ConfigError(f"The {what} {path} of the {where} cannot be read: {_reason(e)}.") from e


def _read_text(path: str, what: str, where: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"The {what} {path} of the {where} cannot be read: {_reason(e)}.") from e


def _yaml_problem(e: yaml.YAMLError) -> str:
    # PyYAML's own text quotes the source as "<unicode string>"; say where, in file terms.
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return str(e)


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e)
