"""One resolution for the stack program and the CLIs: what pulumi-kubernetes and the completions are
given (infra/openshift/cluster_access.py), the check before any resource (infra/config.py), how the
CLIs read the stack's context (infra/compare/access.py), and how a failure the user fixes ends:
in one line (the `atlas` dispatcher, the dynamic providers' host)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cli import main as atlas
from infra.cli.stack_files import access_from_stack_config, load_access
from infra.config import AtlasConfigError, check_kubernetes_access, parse_stack_config
from infra.errors import ActionableError
from infra.kubeconfig import KubeConfigError
from infra.openshift.cluster_access import cluster_access
from infra.openshift.completion import ApiAccess, api_request
from infra.openshift.target import KubernetesTarget
from infra.toolchain.dynamic_host import message_or_traceback
from tests.support import project_with_workloads

OC = "atlas-probe/127-0-0-1:25443/system:serviceaccount:atlas-probe:atlas-user"
SECTION = {"flavour": "kubernetes", "namespace": "atlas-probe", "image": {"reference": "quay.io/atlas/probe:1"}}


def kubeconfig(path: Path, contexts: dict[str, str], current: str = "", ca: str = "/abs/ca.crt") -> Path:
    """A kubeconfig whose contexts each have a cluster (at the server given) and a token user."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for i, (name, server) in enumerate(contexts.items()):
        cluster, user = f"{path.name}-c{i}", f"{path.name}-u{i}"  # names of this file's own
        doc["clusters"].append({"name": cluster, "cluster": {"server": server, "certificate-authority": ca}})
        doc["users"].append({"name": user, "user": {"token": f"token-{i}"}})
        doc["contexts"].append({"name": name, "context": {"cluster": cluster, "user": user}})
    if current:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def ca(tmp_path: Path) -> str:
    path = tmp_path / "ca.crt"
    path.write_text("a CA, not read here")
    return str(path)


def target(file: Path | None = None, context: str | None = None, flavour: str = "kubernetes") -> KubernetesTarget:
    return KubernetesTarget(flavour=flavour, namespace="atlas-probe", kubeconfig_path=file, context=context)


def test_a_named_file_is_the_provider_s_input_as_before(tmp_path: Path, ca: str) -> None:
    file = kubeconfig(tmp_path / "k", {"local": "https://127.0.0.1:16443"}, "local", ca)
    access = cluster_access(target(file))
    assert (access.provider_kubeconfig, access.provider_context) == (str(file), None)
    assert access.provider_kubeconfig_text is None and access.api_url == "https://127.0.0.1:16443"
    assert access.completion == ApiAccess(str(file), None, flavour="kubernetes")
    assert access.completion.props() == {"kubeconfig": str(file), "context": None}  # as state holds it


def test_home_kube_config_is_left_to_the_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str) -> None:
    kubeconfig(tmp_path / ".kube" / "config", {OC: "https://127.0.0.1:25443"}, OC, ca)
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    access = cluster_access(target(context=OC))
    assert (access.provider_kubeconfig, access.provider_kubeconfig_text, access.provider_context) == (None, None, OC)
    assert access.api_url == "https://127.0.0.1:25443"


def test_several_files_give_the_provider_the_one_holding_the_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str
) -> None:
    """`oc login` wrote the context into the second file; the first's current context is elsewhere."""
    first = kubeconfig(tmp_path / "first", {"dead": "https://127.0.0.1:9"}, "dead", ca)
    second = kubeconfig(tmp_path / "second", {OC: "https://127.0.0.1:25443"}, "", ca)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    access = cluster_access(target(context=OC))
    assert access.provider_kubeconfig == str(second) and access.provider_kubeconfig_text is None
    assert access.provider_context == OC and access.api_url == "https://127.0.0.1:25443"
    assert cluster_access(target()).provider_kubeconfig == str(first)  # the current context's file


def test_a_context_spread_over_files_goes_to_the_provider_alone_as_a_secret_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str
) -> None:
    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({"users": [{"name": "me", "user": {"token": "the-token"}}]}))
    second = tmp_path / "second"
    second.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://s:6443", "certificate-authority": ca}},
                     {"name": "other", "cluster": {"server": "https://other"}}],
        "contexts": [{"name": OC, "context": {"cluster": "c", "user": "me", "namespace": "atlas-probe"}},
                     {"name": "x", "context": {"cluster": "other"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    access = cluster_access(target(context=OC))
    assert access.provider_kubeconfig is None and access.provider_kubeconfig_text is not None
    assert "the-token" not in repr(access)
    text = yaml.safe_load(access.provider_kubeconfig_text)
    assert text["current-context"] == OC and [c["name"] for c in text["clusters"]] == ["c"]  # that context alone
    assert text["users"] == [{"name": "me", "user": {"token": "the-token"}}]
    assert access.completion.kubeconfig is None  # the completion resolves KUBECONFIG itself, the same way


def test_relative_references_in_a_named_file_are_not_left_to_the_provider(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("ca")
    file = kubeconfig(tmp_path / "k", {"x": "https://s"}, "x", ca="ca.crt")
    access = cluster_access(target(file))
    assert access.provider_kubeconfig is None
    assert yaml.safe_load(access.provider_kubeconfig_text or "")["clusters"][0]["cluster"]["certificate-authority"] == (
        str(tmp_path / "ca.crt")
    )


def test_relative_kubeconfig_entries_are_refused_for_the_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str
) -> None:
    kubeconfig(tmp_path / "k", {"x": "https://s"}, "x", ca)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", "k")
    with pytest.raises(KubeConfigError, match=r"KUBECONFIG lists k relative to the working folder.*realpath"):
        cluster_access(target())


def test_the_completion_s_props_resolve_as_the_provider_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str
) -> None:
    first = kubeconfig(tmp_path / "first", {"dead": "https://127.0.0.1:9"}, "dead", ca)
    second = kubeconfig(tmp_path / "second", {OC: "https://127.0.0.1:25443"}, "", ca)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    props = {**ApiAccess(None, OC, flavour="openshift", allow_insecure_tls=True).props(), "namespace": "x"}
    assert props["flavour"] == "openshift" and props["insecure_skip_tls_verify"] is True
    request = api_request(props)
    assert (request.file, request.context, request.flavour, request.allow_insecure_tls) == (None, OC, "openshift", True)
    # State written before flavour and the TLS leave were props reads as the defaults.
    old = api_request({"kubeconfig": None, "context": None})
    assert (old.file, old.context, old.flavour, old.allow_insecure_tls) == (None, None, None, False)


# --- before any resource ----------------------------------------------------------------------


def test_a_missing_context_stops_the_stack_before_any_resource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str
) -> None:
    file = kubeconfig(tmp_path / "k", {"dead": "https://127.0.0.1:9", OC: "https://127.0.0.1:25443"}, "dead", ca)
    monkeypatch.setenv("KUBECONFIG", str(file))
    values = {"openshift": {**SECTION, "context": "atlas-probe/elsewhere:6443/me"}}
    config = parse_stack_config("s", values, project_with_workloads(tmp_path))
    with pytest.raises(AtlasConfigError) as refused:
        check_kubernetes_access(config, probe=False)
    assert str(refused.value) == (
        f"atlas:openshift.context: context 'atlas-probe/elsewhere:6443/me' is not in KUBECONFIG ({file}); it has "
        f"'dead', '{OC}': name one of them, or log in to make it (`oc login --server=<API URL>`)"
    )


def test_insecure_tls_is_a_stack_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "k"
    file.write_text(yaml.safe_dump({
        "current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(file))
    project = project_with_workloads(tmp_path)
    section = SECTION
    with pytest.raises(AtlasConfigError, match="sets insecure-skip-tls-verify"):
        check_kubernetes_access(parse_stack_config("s", {"openshift": section}, project), probe=False)
    allowed = parse_stack_config("s", {"openshift": {**section, "insecure_skip_tls_verify": True}}, project)
    assert allowed.openshift is not None and allowed.openshift.insecure_skip_tls_verify
    check_kubernetes_access(allowed, probe=False)
    with pytest.raises(AtlasConfigError, match=r"insecure_skip_tls_verify: expected true or false"):
        parse_stack_config("s", {"openshift": {**section, "insecure_skip_tls_verify": "yes"}}, project)


# --- the CLIs ---------------------------------------------------------------------------------


def test_the_clis_read_the_stack_s_context_and_flags_override_it(tmp_path: Path) -> None:
    section = {**SECTION, "flavour": "openshift", "context": OC, "insecure_skip_tls_verify": True}
    config = parse_stack_config("s", {"openshift": section}, project_with_workloads(tmp_path))
    access = access_from_stack_config(config, tmp_path)
    assert (access.kubeconfig, access.kube_context, access.kube_insecure_tls) == (None, OC, True)
    request = access.kube_request("openshift")
    assert (request.context, request.flavour, request.allow_insecure_tls, request.context_key) == (
        OC, "openshift", True, "atlas:openshift.context"
    )
    args = argparse.Namespace(kubeconfig=tmp_path / "k", context="other", ssh_key=[], known_hosts=[])
    flagged = load_access(args, tmp_path, config).kube_request()
    assert (flagged.file, flagged.context, flagged.file_key, flagged.context_key, flagged.allow_insecure_tls) == (
        tmp_path / "k", "other", "--kubeconfig", "--context", True
    )


def test_a_failure_the_user_fixes_ends_a_command_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ca: str
) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        '{"atlas": {"version": 2, "stack": "s", "workload": "probe", "run_id": "1"}, "environments": {"openshift": '
        '{"kind": "kubernetes", "version": 2, "flavour": "kubernetes", "api_url": "", "namespace": "p", "run_id": "1",'
        ' "image": "", "steps": [], "gpus_requested": 0, "telemetry": {"pvc": "", "path": ""},'
        ' "logs": {"pvc": "", "path": ""}}}}'
    )
    file = kubeconfig(tmp_path / "k", {"dead": "https://127.0.0.1:9"}, "dead", ca)
    monkeypatch.setenv("KUBECONFIG", str(file))
    code = atlas(["monitor", "--outputs", str(outputs), "--once", "--context", "missing"])
    err = capsys.readouterr().err
    assert code == 1
    assert err == (
        f"atlas monitor: --context: context 'missing' is not in KUBECONFIG ({file}); it has 'dead': name one of them, "
        "or log in to make it (`oc login --server=<API URL>`)\n"
    )


def test_the_dynamic_providers_host_reports_a_fixable_failure_without_a_traceback() -> None:
    format_exc = message_or_traceback(traceback.format_exc)
    try:
        raise ActionableError("the API server refused ...; log in again: `oc login --server=https://s`")
    except ActionableError:
        assert format_exc() == "the API server refused ...; log in again: `oc login --server=https://s`"
    try:
        raise ValueError("a bug")
    except ValueError:
        assert format_exc().startswith("Traceback (most recent call last)") and "ValueError: a bug" in format_exc()
    assert sys.exc_info() == (None, None, None)


def test_the_local_site_s_stack_section_is_what_a_project_s_user_writes() -> None:
    from localenv.kube_user import ProjectUser, UserKubeconfig, oc_context_name, openshift_section

    server = "https://127.0.0.1:25443"
    user = ProjectUser("atlas-probe", "atlas-user", "a-token")
    assert oc_context_name(server, user.namespace, user.username) == OC
    files = UserKubeconfig((Path("/k/config"), Path("/k/openshift")), OC, server, "https://127.0.0.1:25441")
    assert files.kubeconfig_env == os.pathsep.join(["/k/config", "/k/openshift"])
    section = openshift_section({**SECTION, "kubeconfig": ".state/x", "project": {"display_name": "p"}}, user, files)
    assert "kubeconfig" not in section and section["context"] == OC and section["namespace"] == "atlas-probe"
    assert section["project"] == {"display_name": "p", "create": False} and section["quota"] == {"manage": False}
    assert "a-token" not in repr(user)


class Reviews:
    """A KubeApi stand-in answering access reviews from a set of what is allowed."""

    def __init__(self, allowed: set[tuple[str, str, str, str]]) -> None:
        self.allowed, self.asked = allowed, []  # type: ignore[var-annotated]
        self.resolved = type("R", (), {"describe": lambda self: "context 'me' (https://s)"})()

    def can_i(self, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> bool:
        self.asked.append((verb, resource, group, namespace))
        return (verb, resource, group, namespace) in self.allowed


@pytest.mark.parametrize(("section", "backfill", "refused"), [
    ({"project": {"create": True}}, None,
     "atlas:openshift.project.create: context 'me' (https://s) may not create namespaces cluster-wide; set it to "
     "false and `namespace` to the project made for you (`oc projects` lists them)"),
    ({"flavour": "openshift", "project": {"create": True}, "image": {"reference": "quay.io/x/y:1"}}, None,
     "atlas:openshift.project.create: context 'me' (https://s) may not create projectrequests.project.openshift.io"),
    ({"project": {"create": False}}, None,
     "atlas:openshift.quota.manage: context 'me' (https://s) may not create resourcequotas in namespace "
     "'atlas-probe'; set it to false: the cluster's admins own the project's quota"),
    ({"project": {"create": False}, "quota": {"manage": False}}, {"workload": "probe"},
     "atlas:backfill.environments: context 'me' (https://s) may not create priorityclasses.scheduling.k8s.io "
     "cluster-wide; leave openshift out of it"),
    ({"project": {"create": False}, "quota": {"manage": False}}, None, None),
])
def test_what_a_project_s_user_may_not_do_stops_the_stack_naming_the_key(
    tmp_path: Path, section: dict[str, Any], backfill: dict[str, Any] | None, refused: str | None
) -> None:
    from infra.config import check_kubernetes_rights

    values: dict[str, Any] = {"openshift": {**SECTION, **section}}
    if backfill is not None:
        values["backfill"] = backfill
    config = parse_stack_config("s", values, project_with_workloads(tmp_path))
    reviews = Reviews(set())
    if refused is None:
        check_kubernetes_rights(config, reviews)  # type: ignore[arg-type]
        assert reviews.asked == []
        return
    with pytest.raises(AtlasConfigError) as stopped:
        check_kubernetes_rights(config, reviews)  # type: ignore[arg-type]
    assert str(stopped.value).startswith(refused)
    check_kubernetes_rights(config, Reviews(set(reviews.asked)))  # type: ignore[arg-type]  # allowed: passes
