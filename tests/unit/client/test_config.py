"""Kubeconfig and service-account loading: every supported feature and every broken case."""

from __future__ import annotations

import base64
import os
import textwrap
import types
from pathlib import Path

import pytest
from trioperator._client.config import (
    ConfigError,
    kubeconfig_exists,
    load_kubeconfig,
    load_service_account,
    login_with_kubeconfig,
    login_with_service_account,
)
from trioperator._client.credentials import ConnectionInfo


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


MINIMAL = """
    current-context: ctx
    contexts:
    - name: ctx
      context: {cluster: c1, user: u1}
    clusters:
    - name: c1
      cluster: {server: "https://c1:6443"}
    users:
    - name: u1
      user: {token: tok1}
"""


# ------------------------------------------------------------------ features


def test_minimal_token_kubeconfig(tmp_path: Path) -> None:
    path = write(tmp_path / "config", MINIMAL)
    info = load_kubeconfig(str(path))
    assert info == ConnectionInfo(server="https://c1:6443", scheme="Bearer", token="tok1")


def test_full_cluster_and_context_features(tmp_path: Path) -> None:
    write(tmp_path / "certs" / "ca.crt", "CA PEM")
    path = write(
        tmp_path / "config",
        """
        current-context: ctx
        contexts:
        - name: ctx
          context: {cluster: c1, user: u1, namespace: team-a}
        clusters:
        - name: c1
          cluster:
            server: https://c1:6443
            certificate-authority: certs/ca.crt
            insecure-skip-tls-verify: false
            proxy-url: http://proxy:3128
            tls-server-name: kubernetes.default
        users:
        - name: u1
          user: {username: admin, password: s3cret}
        """,
    )
    info = load_kubeconfig(str(path))
    assert info.server == "https://c1:6443"
    assert info.ca_path == str(tmp_path / "certs" / "ca.crt")  # relative to the file's directory
    assert info.ca_data is None
    assert info.insecure is False
    assert info.proxy_url == "http://proxy:3128"
    assert info.tls_server_name == "kubernetes.default"
    assert info.default_namespace == "team-a"
    assert info.username == "admin"
    assert info.password == "s3cret"
    assert info.token is None
    assert info.scheme is None


def test_data_fields_are_decoded_and_win_over_paths(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        f"""
        current-context: ctx
        contexts:
        - name: ctx
          context: {{cluster: c1, user: u1}}
        clusters:
        - name: c1
          cluster:
            server: https://c1
            certificate-authority: /nonexistent/ca.crt
            certificate-authority-data: {b64(b"CA-BYTES")}
            insecure-skip-tls-verify: true
        users:
        - name: u1
          user:
            client-certificate-data: {b64(b"CERT-BYTES")}
            client-key-data: {b64(b"KEY-BYTES")}
        """,
    )
    info = load_kubeconfig(str(path))
    assert info.ca_data == b"CA-BYTES"
    assert info.ca_path is None
    assert info.insecure is True
    assert info.certificate_data == b"CERT-BYTES"
    assert info.private_key_data == b"KEY-BYTES"
    assert info.certificate_path is None
    assert info.private_key_path is None
    assert info.token is None


def test_client_certificate_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    write(tmp_path / "kube" / "pki" / "client.crt", "CERT")
    write(tmp_path / "kube" / "pki" / "client.key", "KEY")
    path = write(
        tmp_path / "kube" / "config",
        """
        current-context: ctx
        contexts:
        - {name: ctx, context: {cluster: c1, user: u1}}
        clusters:
        - {name: c1, cluster: {server: "https://c1"}}
        users:
        - name: u1
          user: {client-certificate: pki/client.crt, client-key: pki/client.key}
        """,
    )
    info = load_kubeconfig(str(path))
    assert info.certificate_path == str(tmp_path / "kube" / "pki" / "client.crt")
    assert info.private_key_path == str(tmp_path / "kube" / "pki" / "client.key")


def test_token_file_is_read_at_load_time(tmp_path: Path) -> None:
    write(tmp_path / "token.txt", "from-file\n")
    path = write(
        tmp_path / "config",
        """
        current-context: ctx
        contexts:
        - {name: ctx, context: {cluster: c1, user: u1}}
        clusters:
        - {name: c1, cluster: {server: "https://c1"}}
        users:
        - {name: u1, user: {token: inline, tokenFile: token.txt}}
        """,
    )
    info = load_kubeconfig(str(path))
    assert info.token == "from-file"
    assert info.scheme == "Bearer"


def test_explicit_context_overrides_current_context(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        """
        current-context: one
        contexts:
        - {name: one, context: {cluster: c1}}
        - {name: two, context: {cluster: c2, namespace: ns2}}
        clusters:
        - {name: c1, cluster: {server: "https://c1"}}
        - {name: c2, cluster: {server: "https://c2"}}
        """,
    )
    assert load_kubeconfig(str(path)).server == "https://c1"
    info = load_kubeconfig(str(path), context="two")
    assert info == ConnectionInfo(server="https://c2", default_namespace="ns2")


def test_context_without_user_is_anonymous(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        """
        current-context: ctx
        contexts: [{name: ctx, context: {cluster: c1}}]
        clusters: [{name: c1, cluster: {server: "http://localhost:8080"}}]
        """,
    )
    assert load_kubeconfig(str(path)) == ConnectionInfo(server="http://localhost:8080")


def test_exec_user_with_a_token_uses_the_token(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        """
        current-context: ctx
        contexts: [{name: ctx, context: {cluster: c1, user: u1}}]
        clusters: [{name: c1, cluster: {server: "https://c1"}}]
        users: [{name: u1, user: {token: t, exec: {command: aws}}}]
        """,
    )
    assert load_kubeconfig(str(path)).token == "t"


def test_kubeconfig_env_merges_several_files(tmp_path: Path) -> None:
    write(tmp_path / "b" / "ca.crt", "CA")
    first = write(
        tmp_path / "a" / "config",
        """
        current-context: shared
        contexts:
        - {name: shared, context: {cluster: c-shared, user: u-a, namespace: from-a}}
        clusters:
        - {name: c-shared, cluster: {server: "https://from-a"}}
        users:
        - {name: u-a, user: {token: token-a}}
        """,
    )
    second = write(
        tmp_path / "b" / "config",
        """
        current-context: other
        contexts:
        - {name: shared, context: {cluster: ignored, user: ignored}}
        - {name: other, context: {cluster: c-b, user: u-b}}
        clusters:
        - {name: c-shared, cluster: {server: "https://from-b-ignored"}}
        - {name: c-b, cluster: {server: "https://from-b", certificate-authority: ca.crt}}
        users:
        - {name: u-a, user: {token: ignored}}
        - {name: u-b, user: {token: token-b}}
        """,
    )
    missing = tmp_path / "missing" / "config"  # skipped, like kubectl does
    environ = {"KUBECONFIG": os.pathsep.join([str(missing), str(first), "", str(second)])}

    info = load_kubeconfig(environ=environ)
    assert info == ConnectionInfo(
        server="https://from-a", scheme="Bearer", token="token-a", default_namespace="from-a"
    )

    # Entries only in the second file are found; its relative paths resolve against its own dir.
    other = load_kubeconfig(environ=environ, context="other")
    assert other.server == "https://from-b"
    assert other.ca_path == str(tmp_path / "b" / "ca.crt")
    assert other.token == "token-b"


def test_current_context_from_a_later_file_when_the_first_sets_none(tmp_path: Path) -> None:
    first = write(tmp_path / "1", "clusters: [{name: c1, cluster: {server: 'https://c1'}}]\n")
    second = write(
        tmp_path / "2",
        "current-context: ctx\ncontexts: [{name: ctx, context: {cluster: c1}}]\n",
    )
    info = load_kubeconfig(environ={"KUBECONFIG": f"{first}{os.pathsep}{second}"})
    assert info.server == "https://c1"


def test_default_path_is_home_kube_config(tmp_path: Path) -> None:
    write(tmp_path / ".kube" / "config", MINIMAL)
    info = load_kubeconfig(environ={"HOME": str(tmp_path)})
    assert info.server == "https://c1:6443"
    assert kubeconfig_exists({"HOME": str(tmp_path)})
    assert not kubeconfig_exists({"HOME": str(tmp_path / "nowhere")})
    assert kubeconfig_exists({"HOME": str(tmp_path / "nowhere"), "KUBECONFIG": "/x"})


# ------------------------------------------------------------------ broken kubeconfigs


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist") as e:
        load_kubeconfig(str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in str(e.value)


def test_no_kubeconfig_at_all(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"KUBECONFIG is not set"):
        load_kubeconfig(environ={"HOME": str(tmp_path)})


def test_kubeconfig_env_with_no_existing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"No file listed in \$KUBECONFIG exists"):
        load_kubeconfig(environ={"KUBECONFIG": str(tmp_path / "a")})


def test_unreadable_kubeconfig_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Cannot read the kubeconfig"):
        load_kubeconfig(str(tmp_path))


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path / "config", "clusters: [unclosed\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML") as e:
        load_kubeconfig(str(path))
    assert str(path) in str(e.value)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "config", text)
    with pytest.raises(ConfigError, match=r"must be a YAML mapping"):
        load_kubeconfig(str(path))


def test_empty_file_has_no_current_context(tmp_path: Path) -> None:
    path = write(tmp_path / "config", "")
    with pytest.raises(ConfigError, match=r"current-context is not set") as e:
        load_kubeconfig(str(path))
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("current-context: x\ncontexts: []\n", r"Context 'x' is not defined"),
        (
            "current-context: x\ncontexts: [{name: x, context: {user: u}}]\n",
            r"context 'x' in .* names no cluster",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n",
            r"Cluster 'c' \(of the context 'x' in .*\) is not defined",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "clusters: [{name: c, cluster: {server: 'https://c'}}]\n",
            r"User 'u' \(of the context 'x' in .*\) is not defined",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
            "clusters: [{name: c, cluster: {certificate-authority-data: ''}}]\n",
            r"cluster 'c' in .* has no server",
        ),
        ("contexts: {x: y}\n", r"'contexts' must be a list"),
        ("clusters: [{cluster: {server: s}}]\n", r"clusters\[0\] must be a mapping with a name"),
        ("users: [{name: u, user: [1, 2]}]\n", r"user 'u' must be a mapping"),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
            "clusters: [{name: c, cluster: {server: 42}}]\n",
            r"server must be a string",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
            "clusters: [{name: c, cluster: {server: s, insecure-skip-tls-verify: 'yes'}}]\n",
            r"insecure-skip-tls-verify must be true or false",
        ),
    ],
)
def test_broken_structure(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "config", text)
    with pytest.raises(ConfigError, match=message) as e:
        load_kubeconfig(str(path))
    assert str(path) in str(e.value)


def test_requested_context_not_found(tmp_path: Path) -> None:
    path = write(tmp_path / "config", MINIMAL)
    with pytest.raises(ConfigError, match=r"Context 'other' is not defined"):
        load_kubeconfig(str(path), context="other")


USER_TEMPLATE = """
    current-context: ctx
    contexts: [{{name: ctx, context: {{cluster: c1, user: u1}}}}]
    clusters: [{{name: c1, cluster: {cluster}}}]
    users: [{{name: u1, user: {user}}}]
"""


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        (
            "{server: s, certificate-authority: missing-ca.crt}",
            "{}",
            r"CA certificate .*missing-ca\.crt of the cluster 'c1' in .* cannot be read",
        ),
        (
            "{server: s, certificate-authority-data: '!!not base64!!'}",
            "{}",
            r"certificate-authority-data is not valid base64",
        ),
        ("{server: s}", "{tokenFile: missing-token}", r"token file .*missing-token .*cannot be"),
        ("{server: s}", "{tokenFile: empty-token}", r"token file .*empty-token .* is empty"),
        (
            "{server: s}",
            "{client-certificate: missing.crt, client-key: missing.key}",
            r"client certificate .*missing\.crt of the user 'u1' in .* cannot be read",
        ),
        (
            "{server: s}",
            "{client-certificate-data: 'Zm9v', client-key: missing.key}",
            r"client key .*missing\.key of the user 'u1' in .* cannot be read",
        ),
        (
            "{server: s}",
            "{client-certificate-data: 'Zm9v', client-key-data: 'not_b64!'}",
            r"client-key-data is not valid base64",
        ),
        (
            "{server: s}",
            "{client-certificate-data: 'Zm9v'}",
            r"has a client certificate but no client key",
        ),
        ("{server: s}", "{client-key-data: 'Zm9v'}", r"has a client key but no client certificate"),
        (
            "{server: s}",
            "{exec: {command: aws, args: [eks, get-token]}}",
            r"user 'u1' in .* authenticates via 'exec', which trioperator does not run",
        ),
        (
            "{server: s}",
            "{auth-provider: {name: oidc}}",
            r"authenticates via 'auth-provider'.*@on\.login",
        ),
    ],
)
def test_broken_credentials(tmp_path: Path, cluster: str, user: str, message: str) -> None:
    write(tmp_path / "empty-token", "  \n")
    path = write(tmp_path / "config", USER_TEMPLATE.format(cluster=cluster, user=user))
    with pytest.raises(ConfigError, match=message) as e:
        load_kubeconfig(str(path))
    assert str(path) in str(e.value)


# ------------------------------------------------------------------ service account


def make_service_account(root: Path, *, token: str = "sa-token\n", namespace: bool = True) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "token").write_text(token)
    (root / "ca.crt").write_text("CA")
    if namespace:
        (root / "namespace").write_text("operators\n")


IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_service_account(tmp_path: Path) -> None:
    make_service_account(tmp_path)
    info = load_service_account(root=str(tmp_path), environ=IN_CLUSTER)
    assert info == ConnectionInfo(
        server="https://10.0.0.1:443",
        ca_path=str(tmp_path / "ca.crt"),
        scheme="Bearer",
        token="sa-token",
        default_namespace="operators",
    )


def test_service_account_ipv6_host_gets_brackets(tmp_path: Path) -> None:
    make_service_account(tmp_path)
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    info = load_service_account(root=str(tmp_path), environ=environ)
    assert info is not None
    assert info.server == "https://[fd00::1]:6443"


def test_service_account_without_namespace_file(tmp_path: Path) -> None:
    make_service_account(tmp_path, namespace=False)
    info = load_service_account(root=str(tmp_path), environ=IN_CLUSTER)
    assert info is not None
    assert info.default_namespace is None


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"KUBERNETES_SERVICE_HOST": "10.0.0.1"},
        {"KUBERNETES_SERVICE_PORT": "443"},
        {"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "443"},
    ],
)
def test_not_in_cluster_without_env(tmp_path: Path, environ: dict[str, str]) -> None:
    make_service_account(tmp_path)
    assert load_service_account(root=str(tmp_path), environ=environ) is None


def test_not_in_cluster_without_token(tmp_path: Path) -> None:
    assert load_service_account(root=str(tmp_path / "absent"), environ=IN_CLUSTER) is None


def test_service_account_broken_cases(tmp_path: Path) -> None:
    make_service_account(tmp_path / "empty", token="\n")
    with pytest.raises(ConfigError, match=r"token file .* is empty"):
        load_service_account(root=str(tmp_path / "empty"), environ=IN_CLUSTER)

    make_service_account(tmp_path / "noca")
    (tmp_path / "noca" / "ca.crt").unlink()
    with pytest.raises(ConfigError, match=r"CA certificate .*ca\.crt does not exist"):
        load_service_account(root=str(tmp_path / "noca"), environ=IN_CLUSTER)

    (tmp_path / "dirtoken").mkdir()
    (tmp_path / "dirtoken" / "token").mkdir()
    with pytest.raises(ConfigError, match=r"token file .*token of the service account cannot"):
        load_service_account(root=str(tmp_path / "dirtoken"), environ=IN_CLUSTER)

    make_service_account(tmp_path / "ok")
    environ = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "https"}
    with pytest.raises(ConfigError, match=r"KUBERNETES_SERVICE_PORT is not a port number"):
        load_service_account(root=str(tmp_path / "ok"), environ=environ)


# ------------------------------------------------------------------ login functions


def test_login_with_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert login_with_kubeconfig(logger=None, memo=None) is None  # no source: not an error

    write(tmp_path / ".kube" / "config", MINIMAL)
    info = login_with_kubeconfig(logger=None)
    assert info is not None
    assert info.token == "tok1"
    assert info.trust_env is False

    settings = types.SimpleNamespace(networking=types.SimpleNamespace(trust_env=True))
    info = login_with_kubeconfig(settings=settings)
    assert info is not None
    assert info.trust_env is True

    write(tmp_path / ".kube" / "config", "current-context: [broken\n")
    with pytest.raises(ConfigError, match=r"not valid YAML"):
        login_with_kubeconfig()

    # $KUBECONFIG set but pointing nowhere is a broken configuration, not an absent one.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(ConfigError):
        login_with_kubeconfig()


def test_login_with_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real mount path does not exist in tests; the env alone does not make a cluster.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    assert login_with_service_account(logger=None, settings=None) is None
