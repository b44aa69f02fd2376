"""What a user's own Pulumi program imports from the installed package: the components and the
types their Args need, exported lazily from `infra.hpc`, `infra.openshift` and `infra.aws`, built
by hand with the same defaults as a stack's config, and light imports that stay light."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from infra.hpc.ssh.resolve import resolve_endpoint
from infra.hpc.target import HpcConfigError, HpcTarget
from infra.hpc.target_parser import parse_hpc_target
from infra.openshift.settings import OpenShiftSettingsError
from infra.openshift.settings_parser import openshift_settings, parse_openshift_settings
from infra.toolchain.pins import REPO_ROOT

KNOWN_HOSTS = "[login.example.org]:22 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n"
PACKAGES = ("infra.hpc", "infra.openshift", "infra.aws")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_is_the_object_its_module_defines(package: str) -> None:
    module = importlib.import_module(package)
    exports = module._EXPORTS
    assert sorted(module.__all__) == sorted(exports) and set(exports) <= set(dir(module))
    for name, home in exports.items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError, match="no attribute 'Missing'"):
        module.Missing  # noqa: B018 (the access is the test)


def test_the_components_are_exported_where_a_user_looks() -> None:
    from infra.aws import AwsEnvironment, AwsEnvironmentArgs
    from infra.hpc import HpcEnvironment, HpcEnvironmentArgs
    from infra.openshift import OpenShiftEnvironment, OpenShiftEnvironmentArgs

    assert {c.__name__ for c in (HpcEnvironment, OpenShiftEnvironment, AwsEnvironment)} == {
        "HpcEnvironment", "OpenShiftEnvironment", "AwsEnvironment",
    }
    assert {a.__name__ for a in (HpcEnvironmentArgs, OpenShiftEnvironmentArgs, AwsEnvironmentArgs)} == {
        "HpcEnvironmentArgs", "OpenShiftEnvironmentArgs", "AwsEnvironmentArgs",
    }


def test_light_imports_do_not_import_pulumi_or_boto3() -> None:
    # The SSH pool and the sampler run where Pulumi is not (the sampler on a login node's own
    # Python); the packages' lazy exports keep their __init__ from importing the components.
    done = _python(
        "import sys, infra.hpc.ssh, infra.telemetry.sampler, infra.hpc, infra.openshift, infra.aws, infra.config\n"
        "print(sorted(m for m in ('pulumi', 'pulumi_kubernetes', 'boto3') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_aws_without_boto3_fails_with_one_line_naming_the_extra() -> None:
    # None in sys.modules makes `import boto3` fail as if it were not installed.
    done = _python("import sys; sys.modules['boto3'] = None\nfrom infra.aws import AwsEnvironment")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: infra.aws (AwsEnvironment) needs the `aws` extra (boto3 is not installed): "
        "pip install 'atlas-infra[aws]'"
    )


def test_an_hpc_target_built_by_hand_has_the_defaults_of_a_stacks_config(tmp_path: Path) -> None:
    by_hand = HpcTarget(host="login.example.org", user="alex", scheduler="slurm", known_hosts=KNOWN_HOSTS,
                        private_key_file=tmp_path / "id")
    section = {"host": "login.example.org", "user": "alex", "scheduler": "slurm", "known_hosts": KNOWN_HOSTS,
               "private_key_file": str(tmp_path / "id")}
    assert by_hand == parse_hpc_target(section, "atlas:hpc.cluster")


def test_an_hpc_target_without_host_keys_takes_them_from_the_ssh_config_or_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(HpcConfigError, match="at most one of known_hosts"):
        HpcTarget(host="login.example.org", user="alex", scheduler="slurm", known_hosts=KNOWN_HOSTS,
                  known_hosts_file=tmp_path / "known_hosts")
    # Without host keys of its own, a target's come from the ssh config's known_hosts files: none
    # here, so resolving it is refused, naming where Atlas looked and how to add the key.
    monkeypatch.setenv("HOME", str(tmp_path))
    target = HpcTarget(host="login.example.org", user="alex", scheduler="slurm", private_key_file=tmp_path / "id")
    with pytest.raises(HpcConfigError, match=r"no host key for the login node login\.example\.org in ") as caught:
        resolve_endpoint(target, "atlas:hpc.cluster")
    text = str(caught.value)
    assert f"{tmp_path}/.ssh/known_hosts" in text and "ssh-keyscan -p 22 login.example.org" in text


def test_openshift_settings_by_hand_are_the_parsers_with_its_defaults_and_checks() -> None:
    image = {"reference": "quay.io/example/app:1"}
    built = openshift_settings("kubernetes", image=image, monitor={"enabled": False})
    assert built == parse_openshift_settings({"image": image, "monitor": {"enabled": False}}, "openshift", "kubernetes")
    assert built.storage.data.size.text == "200Gi" and built.flavour == "kubernetes"
    with pytest.raises(OpenShiftSettingsError, match=r"openshift: unknown key\(s\) imagee"):
        openshift_settings("kubernetes", imagee=image)


def test_aws_settings_by_hand_name_their_keys() -> None:
    from infra.aws import AwsConfigError, aws_settings

    settings = aws_settings(region="us-east-1", ami="ami-0123456789abcdef0", endpoint_url="http://127.0.0.1:1",
                            execute=False)
    assert settings.region == "us-east-1" and settings.instance_type.name == "p3.8xlarge"
    with pytest.raises(AwsConfigError, match=r"aws\.region"):
        aws_settings(region="mars-1", ami="ami-0123456789abcdef0")
