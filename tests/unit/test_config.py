"""infra/config.py: every bad value is refused with the key and the fix."""

from pathlib import Path

import pytest

from infra.config import AtlasConfigError, check_local_files, check_wait_for, parse_stack_config
from tests.unit.test_hpc_target import KNOWN_HOSTS

# The repository itself: shipped workloads are folders under the project's workloads/.
PROJECT_DIR = Path(__file__).resolve().parents[2]
GOOD = {"workload": "probe", "openshift": {"flavour": "kubernetes", "namespace": "atlas-local",
                                            "kubeconfig": ".state/kubeconfig",
                                            "image": {"reference": "quay.io/atlas/probe:1"}}}
BUILD = {"build": {"git_uri": "https://github.com/example/atlas.git", "base_image": "quay.io/x/torch:1"}}


def test_good_config_is_typed():
    cfg = parse_stack_config("local", GOOD, PROJECT_DIR)
    assert cfg.stack == "local"
    assert cfg.workload == "probe"
    assert cfg.openshift is not None
    assert cfg.openshift.namespace == "atlas-local"
    assert not cfg.openshift.is_openshift
    # Relative kubeconfig paths are resolved against the project folder, not the cwd.
    assert cfg.openshift.kubeconfig_path == PROJECT_DIR / ".state/kubeconfig"


def test_flavour_defaults_to_openshift():
    cfg = parse_stack_config("s", {"openshift": {"namespace": "biggan", "image": BUILD}}, PROJECT_DIR)
    assert cfg.openshift is not None and cfg.openshift.is_openshift
    assert cfg.openshift.kubeconfig_path is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**GOOD, "workload": "resnet"},
            "atlas:workload: 'resnet' is not a workload that ships with Atlas; name a workload that ships "
            "(biggan, probe, wordfreq)",
        ),
        ({**GOOD, "opneshift": {}}, "unknown key(s) opneshift"),
        ({"openshift": {"namespace": "Atlas_Local"}}, "atlas:openshift.namespace: 'Atlas_Local' is not a valid"),
        ({"openshift": {"namespace": "a" * 64}}, "atlas:openshift.namespace"),
        ({"openshift": {"namespace": "ok", "flavour": "okd"}}, "atlas:openshift.flavour: expected one of"),
        ({"openshift": {"namespace": "ok", "nodeSelector": "x"}}, "atlas:openshift: unknown key(s) nodeSelector"),
        ({"openshift": {"namespace": "ok", "flavour": "kubernetes"}}, "atlas:openshift.image: no image source"),
        ({**GOOD, "runId": "Run 1"}, "atlas:runId: 'Run 1' is not a run id"),
        ({"hpc": {"satori": {"scheduler": "pbs"}}}, "atlas:hpc.satori.host"),
        ({"hpc": {"satori": {"host": "h", "user": "u", "scheduler": "pbs"}}}, "atlas:hpc.satori.scheduler"),
        ({"hpc": {"Satori_1": {}}}, "atlas:hpc.Satori_1: the environment name 'Satori_1' is not a valid"),
        ({"hpc": {"satori": {"user": "REPLACE_WITH_SATORI_USER"}}},
         "atlas:hpc.satori.user: still the example's placeholder REPLACE_WITH_SATORI_USER"),
        ({"hpc": {"satori": {"enabled": False}}}, "no environment is enabled"),
        ({**GOOD, "hpc": {"satori": {"host": "h", "user": "u", "scheduler": "lsf", "wait_for": "train"}}},
         "atlas:hpc.satori.wait_for: expected a list of step names"),
        ({"hpc": {"satori": {"host": "h", "user": "u", "scheduler": "lsf", "provenance": ""}}},
         "atlas:hpc.satori.provenance: expected text saying what the environment is"),
        ({"openshift": {}}, "atlas:openshift.namespace: required; set it with `pulumi config set --path"),
        ({"openshift": "yes"}, "atlas:openshift: expected an object"),
        ({"openshift": {"namespace": "ok", "enabled": "maybe"}}, "atlas:openshift.enabled: expected true or false"),
        ({"openshift": {"namespace": "ok", "enabled": False}}, "no environment is enabled"),
        ({}, "no environment is enabled"),
    ],
)
def test_bad_values_name_the_key(values, message):
    with pytest.raises(AtlasConfigError) as err:
        parse_stack_config("s", values, PROJECT_DIR)
    assert message in str(err.value)


def test_an_hpc_environment_is_never_real_by_default(tmp_path):
    env = {"host": "h", "user": "u", "scheduler": "lsf", "known_hosts": KNOWN_HOSTS,
           "private_key_file": str(tmp_path / "id_ed25519")}
    unstated = parse_stack_config("s", {"hpc": {"satori": env}}, PROJECT_DIR).hpc[0]
    assert unstated.provenance == "provenance not stated"
    stated = parse_stack_config("s", {"hpc": {"satori": {**env, "provenance": " local stand-in: mock GPUs "}}},
                                PROJECT_DIR).hpc[0]
    assert stated.provenance == "local stand-in: mock GPUs"


def test_files_the_config_names_must_exist_before_preview_plans_anything(tmp_path):
    """A kubeconfig or private key that is not there is refused naming the key and the path; the
    key's contents are never read into the message."""
    key = tmp_path / "id_ed25519"
    kubeconfig = tmp_path / "kubeconfig"
    values = {
        "openshift": {**GOOD["openshift"], "kubeconfig": str(kubeconfig)},
        "hpc": {"satori": {"host": "h", "user": "u", "scheduler": "lsf", "known_hosts": KNOWN_HOSTS,
                           "private_key_file": str(key)}},
    }
    config = parse_stack_config("s", values, PROJECT_DIR)
    with pytest.raises(AtlasConfigError, match=rf"^atlas:openshift\.kubeconfig: {kubeconfig} does not exist .*"
                                               r"run `scripts/localenv up` first"):
        check_local_files(config)
    kubeconfig.write_text("apiVersion: v1\n")
    with pytest.raises(AtlasConfigError, match=rf"^atlas:hpc\.satori\.private_key_file: {key} does not exist"):
        check_local_files(config)
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    check_local_files(config)
    key.unlink()
    key.mkdir()  # a folder is not a key file either
    with pytest.raises(AtlasConfigError, match=r"private_key_file: .* is not a file"):
        check_local_files(config)


def test_wait_for_must_name_steps_of_the_workload():
    env = {"host": "h", "user": "u", "scheduler": "lsf", "known_hosts": KNOWN_HOSTS, "private_key_file": "/k",
           "wait_for": ["make-hdf5", "train-typo"]}
    config = parse_stack_config("s", {"hpc": {"satori": env}}, PROJECT_DIR)
    with pytest.raises(AtlasConfigError) as error:
        check_wait_for(config, ["make-hdf5", "inception-moments", "train"])
    assert str(error.value) == (
        "atlas:hpc.satori.wait_for[1]: 'train-typo' is not a step of the workload; "
        "use some of make-hdf5, inception-moments, train"
    )
    check_wait_for(config, ["make-hdf5", "train-typo"])
