"""A stack's configuration, read through Pulumi and validated once into infra/stack_config.py's dataclasses.

Components never read `pulumi.Config` themselves: `stacks/__main__.py` calls
`load_stack_config()` before it registers any resource, so a bad value stops
`pulumi preview` with a message naming the key, what was found and what is expected.

The values are validated by the pydantic models of infra/config_model.py (one per section,
each beside the code that uses it), the only reader of the `atlas:` keys and the source of
docs/configuration.md; this module builds the frozen dataclasses the rest of the code takes
from the validated models, and checks what needs more than the values (files, ssh routes, the
cluster's rights). `parse_stack_config` takes plain dicts (what `pulumi.Config.get_object`
returns), so it is tested without a Pulumi engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import urllib.error
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.aws.settings_parser import resolve_credentials
from infra.config_model import OBJECT_KEYS, PROJECT, validate_stack
from infra.config_schema import SECRET_FIELDS, reject_placeholders
from infra.errors import AtlasConfigError
from infra.hpc.target_parser import load_known_hosts
from infra.nodes.settings import check_backfill_targets
from infra.openshift.target import KubernetesTarget
from infra.stack_config import HpcEnvironmentConfig, StackConfig
from infra.validation import config_path
from infra.workload.load import locate_workload
from infra.workload.model import WorkloadError

if TYPE_CHECKING:
    from infra.kubeapi import KubeApi

__all__ = [
    "PROJECT", "AtlasConfigError", "KubernetesTarget", "StackConfig", "load_stack_config", "parse_stack_config",
]


def _key(section: str, field: str | None = None) -> str:
    return f"{PROJECT}:{section}" + (f".{field}" if field else "")


def parse_stack_config(stack: str, values: Mapping[str, Any], project_dir: Path) -> StackConfig:
    """Validate the stack's `atlas:*` values (keys without the `atlas:` prefix) by the models
    (infra/config_model.py) into StackConfig. A template's placeholder left anywhere is refused
    first, naming its key."""
    for name, value in values.items():
        reject_placeholders(value, _key(str(name)))
    model = validate_stack(values)
    workload_file = _locate(model.workload, project_dir, _key("workload"))
    target = settings = None
    if model.openshift is not None and model.openshift.enabled:
        section = model.openshift
        target = KubernetesTarget(
            flavour=section.flavour,
            namespace=section.namespace,
            kubeconfig_path=config_path(section.kubeconfig, project_dir) if section.kubeconfig else None,
            context=section.context,
            insecure_skip_tls_verify=section.insecure_skip_tls_verify,
        )
        settings = section.settings(_key("openshift"))
    hpc = []
    for name, env in model.hpc.items():
        hpc_target = env.target(project_dir)
        # Read the host keys now: a missing known_hosts file must stop preview before any resource.
        if hpc_target.has_known_hosts:
            load_known_hosts(hpc_target)
        hpc.append(HpcEnvironmentConfig(name, hpc_target, env.wait_for, env.provenance))
    aws = None
    if model.aws is not None and model.aws.enabled:
        aws = model.aws.settings(_key("aws"), project_dir)
    if target is None and not hpc and aws is None:
        raise AtlasConfigError(
            f"{_key('openshift')} / {_key('hpc')} / {_key('aws')}: no environment is enabled; "
            "set at least one (see stacks/Pulumi.local.yaml)"
        )
    backfill = model.backfill.settings() if model.backfill is not None and model.backfill.enabled else None
    backfill_workload_file = None
    if backfill is not None:
        check_backfill_targets(
            backfill, target is not None, {h.name: h.target.scheduler for h in hpc}, _key("backfill")
        )
        if backfill.workload is not None:
            backfill_workload_file = _locate(backfill.workload, project_dir, _key("backfill", "workload"))
    workload_source = config_path(model.workload_source, project_dir) if model.workload_source else None
    return StackConfig(stack=stack, workload=model.workload, workload_file=workload_file, openshift=target,
                       openshift_settings=settings, hpc=tuple(hpc), run_id=model.run_id, aws=aws, backfill=backfill,
                       backfill_workload_file=backfill_workload_file, workload_source=workload_source,
                       sweep_max_attempts=model.sweep.max_attempts)


def _locate(value: Any, project_dir: Path, key: str) -> Path:
    """A workload named in config (a shipped name, or a path to a definition): its workload.yaml."""
    try:
        return locate_workload(value, project_dir, key)
    except WorkloadError as error:
        raise AtlasConfigError(str(error)) from None


# SECRET_FIELDS (infra.config_schema) hold a secret: set with `pulumi config set --secret`, so the
# stack file keeps them encrypted. A private key pasted into any other field is found by its armour line.


def _secret_paths(value: Any, path: str) -> list[str]:
    if isinstance(value, Mapping):
        found = []
        for name, item in value.items():
            child = f"{path}.{name}"
            if name in SECRET_FIELDS and item not in (None, ""):
                found.append(child)
            else:
                found += _secret_paths(item, child)
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _secret_paths(item, f"{path}[{i}]")]
    return [path] if isinstance(value, str) and "PRIVATE KEY-----" in value else []


def check_secrets_are_secret(values: Mapping[str, Any], secret_keys: frozenset[str]) -> None:
    """Every secret the config holds was set as a Pulumi secret (its top-level key is in
    `secret_keys`, what the engine reports as secret): one in plain text would sit readable in
    Pulumi.<stack>.yaml and in the state. The value is never shown."""
    for name, value in values.items():
        if f"{PROJECT}:{name}" in secret_keys:
            continue
        for path in _secret_paths(value, _key(name)):
            raise AtlasConfigError(
                f"{path}: holds a secret in plain text (value not shown), readable in the stack file; remove it and "
                f"set it with `pulumi config set --secret --path {path} ...` (a key file: `< ~/.ssh/id_ed25519`)"
            )


def check_local_files(config: StackConfig) -> None:
    """The files the config names on this machine exist, before any resource: a kubeconfig or a
    private key that is not there would otherwise pass `preview` (which plans as if it were) and
    fail halfway through `up`. Paths are named, never their contents."""
    wanted: list[tuple[str, Path | None, str]] = []
    if config.openshift is not None:
        wanted.append((
            _key("openshift", "kubeconfig"),
            config.openshift.kubeconfig_path,
            "point it at the cluster's kubeconfig (for the local environment: run `scripts/localenv up` first)",
        ))
    for hpc in config.hpc:
        wanted.append((
            f"{_key('hpc')}.{hpc.name}.private_key_file",
            hpc.target.private_key_file,
            "point it at the SSH private key for the login node, or set the key as a secret (private_key)",
        ))
    if config.aws is not None:
        wanted.append((
            _key("aws", "ssh_private_key_file"),
            config.aws.ssh_private_key_file,
            "point it at the private half of ssh_public_key_file, or remove both (AWS then creates the key pair)",
        ))
    for key, path, fix in wanted:
        if path is not None and not path.is_file():
            raise AtlasConfigError(f"{key}: {path} does not exist or is not a file; {fix}")


def check_ssh_routes(config: StackConfig) -> None:
    """Each HPC login node can be reached from here as the user's ssh config says (an alias, jump
    hosts, the agent, a master connection), before any resource: an unknown alias, a host key not
    on file or no key to offer stops preview, naming the key and the fix. Nothing is connected to."""
    from infra.hpc.ssh.resolve import check_endpoint, refuse_real_route

    for hpc in config.hpc:
        key = f"{_key('hpc')}.{hpc.name}"
        endpoint = check_endpoint(hpc.target, key)
        # The route as resolved (an alias's HostName, its jump hosts): a stack may not call real
        # what is reached on this machine's loopback (infra/provenance.py).
        refuse_real_route(hpc.provenance, endpoint, key)


def check_kubernetes_access(config: StackConfig, probe: bool = True) -> None:
    """The cluster `atlas:openshift` names is found as kubectl would find it (the stack's file, else
    KUBECONFIG merged, else ~/.kube/config; the named context, else the current one) and, with
    `probe`, accepts its credentials, before any resource: a context that is not there is refused
    listing those that are (AtlasConfigError), credentials the server refuses end in one line
    saying how to log in again (infra.kubeapi.KubeAuthError). A server that does not answer is
    left to pulumi-kubernetes, which reports it as unreachable."""
    if config.openshift is None:
        return
    from infra.kubeapi import KubeApi
    from infra.kubeconfig import KubeConfigError
    from infra.openshift.cluster_access import cluster_access

    try:
        access = cluster_access(config.openshift)
        api = KubeApi(access.resolved, timeout_s=10.0)
    except KubeConfigError as error:
        raise AtlasConfigError(str(error)) from None
    if probe:
        with contextlib.suppress(OSError, urllib.error.URLError):
            api.get_json_or_text("/version")
            check_kubernetes_rights(config, api)


def kubernetes_rights(config: StackConfig) -> list[tuple[tuple[str, str, str, str], str, str]]:
    """What the stack will ask of the cluster beyond a project's own rights: for each, the access
    review (verb, resource, group, namespace), the key that asks for it and the fix."""
    target, settings = config.openshift, config.openshift_settings
    if target is None:
        return []
    wanted = []
    if settings is not None and settings.project.create:
        review = (
            ("create", "projectrequests", "project.openshift.io", "")
            if target.is_openshift
            else ("create", "namespaces", "", "")
        )
        wanted.append((
            review,
            _key("openshift", "project.create"),
            "set it to false and `namespace` to the project made for you (`oc projects` lists them)",
        ))
    if settings is not None and settings.quota.manage and not (settings.project.create):
        wanted.append((
            ("create", "resourcequotas", "", target.namespace),
            _key("openshift", "quota.manage"),
            "set it to false: the cluster's admins own the project's quota",
        ))
    backfill = config.backfill
    if backfill is not None and (backfill.environments is None or "openshift" in backfill.environments):
        wanted.append((
            ("create", "priorityclasses", "scheduling.k8s.io", ""),
            _key("backfill", "environments"),
            "leave openshift out of it, or ask the cluster's admins for the right to create PriorityClasses",
        ))
    return wanted


def check_kubernetes_rights(config: StackConfig, api: KubeApi) -> None:
    """Each right `kubernetes_rights` names is the identity's (a SelfSubjectAccessReview, as `oc
    auth can-i`), before any resource; AtlasConfigError naming the key and the fix otherwise."""
    for (verb, resource, group, namespace), key, fix in kubernetes_rights(config):
        if not api.can_i(verb, resource, group, namespace):
            where = f"in namespace {namespace!r}" if namespace else "cluster-wide"
            what = f"{resource}.{group}" if group else resource
            raise AtlasConfigError(
                f"{key}: {api.resolved.describe()} may not {verb} {what} {where}; {fix}"
            )


def check_wait_for(config: StackConfig, steps: Sequence[str]) -> None:
    """Every `wait_for` names a step of the workload (known only once the definition is loaded)."""
    named = [(f"{_key('hpc')}.{h.name}.wait_for", h.wait_for) for h in config.hpc]
    if config.aws is not None:
        named.append((_key("aws", "wait_for"), config.aws.wait_for))
    for key, wait_for in named:
        for i, step in enumerate(wait_for or ()):
            if step not in steps:
                raise AtlasConfigError(
                    f"{key}[{i}]: {step!r} is not a step of the workload; use some of {', '.join(steps)}"
                )


def config_values(document: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """`pulumi config --show-secrets --json -s STACK` read as the program reads its config: each
    `atlas:` key's value (an object for the keys in OBJECT_KEYS, text for the rest, as
    `load_stack_config` asks `pulumi.Config`) and the keys held as secrets. The values are never
    shown; a secret the document does not carry (printed without --show-secrets) is refused."""
    values: dict[str, Any] = {}
    secret_keys: set[str] = set()
    for full_key, entry in document.items():
        project, _, name = str(full_key).partition(":")
        if project != PROJECT or not isinstance(entry, Mapping):
            continue
        if entry.get("secret"):
            secret_keys.add(str(full_key))
        if "value" not in entry and "objectValue" not in entry:
            raise AtlasConfigError(
                f"{full_key}: a secret whose value pulumi did not show; read the config with "
                "`pulumi config --show-secrets --json`"
            )
        value = entry.get("value")
        if name in OBJECT_KEYS:
            value = entry.get("objectValue")
            if value is None and isinstance(entry.get("value"), str):
                try:
                    value = json.loads(entry["value"])
                except ValueError:
                    raise AtlasConfigError(
                        f"{full_key}: expected an object (YAML mapping), found text that is not JSON (value not shown)"
                    ) from None
        values[name] = value
    return values, frozenset(secret_keys)


def stack_config_from_values(
    stack: str, values: Mapping[str, Any], secret_keys: frozenset[str], project_dir: Path
) -> StackConfig:
    """What `load_stack_config` does with the values, for a reader outside the program (the
    `atlas` commands): secrets checked to be secret, then every section parsed, relative paths
    against the project's folder (known_hosts files read, as parsing does). The other files the
    config names (a kubeconfig, key files) are not checked here: a command that cannot use one
    says so for that environment alone."""
    check_secrets_are_secret(values, secret_keys)
    return parse_stack_config(stack, values, project_dir)


def load_stack_config() -> StackConfig:
    """Read the running stack's config through Pulumi; call once, before any resource."""
    import pulumi
    from pulumi.runtime.config import CONFIG, is_config_secret

    config = pulumi.Config(PROJECT)
    values: dict[str, Any] = {}
    secret_keys: set[str] = set()
    # Every `atlas:` key the stack sets, so an unknown or misspelt one is reported.
    for full_key in CONFIG.get():
        project, _, name = full_key.partition(":")
        if project == PROJECT:
            values[name] = config.get_object(name) if name in OBJECT_KEYS else config.get(name)
            if is_config_secret(full_key):
                secret_keys.add(full_key)
    # A secret set in plain text stops preview before it goes further (into state, say).
    check_secrets_are_secret(values, frozenset(secret_keys))
    # Relative paths in config are relative to the project (Pulumi.yaml's folder), not to
    # the program's folder (stacks/), which is the working directory here.
    parsed = parse_stack_config(pulumi.get_stack(), values, Path(pulumi.get_root_directory()))
    check_local_files(parsed)
    check_ssh_routes(parsed)
    check_kubernetes_access(parsed)
    if parsed.aws is not None:
        # Missing AWS credentials stop preview here, naming the key, not at the first AWS call.
        parsed = dataclasses.replace(parsed, aws=resolve_credentials(parsed.aws))
    return parsed
