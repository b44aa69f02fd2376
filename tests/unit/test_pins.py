"""The toolchain pins and the Python SDK pins must name the same versions."""

import tomllib

from infra.toolchain.pins import REPO_ROOT, load_pins


def _pyproject_pins() -> dict[str, str]:
    deps = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return dict(d.split("==", 1) for d in deps if "==" in d)


def test_pulumi_cli_and_sdk_versions_agree():
    pins = load_pins()
    deps = _pyproject_pins()
    assert deps["pulumi"] == pins.pulumi
    assert deps["pulumi-kubernetes"] == pins.pulumi_kubernetes


def test_kubernetes_staging_version_follows_the_release():
    pins = load_pins()
    major, minor, patch = pins.kubernetes.split(".")
    assert major == "1"
    assert pins.kubernetes_staging == f"v0.{minor}.{patch}"


def test_cache_key_changes_with_the_pins(tmp_path):
    text = (REPO_ROOT / "toolchain" / "pins.toml").read_text()
    other = tmp_path / "pins.toml"
    other.write_text(text.replace('version = "1.36.3"', 'version = "1.36.1"'))
    assert load_pins(other).digest_of("kubernetes") != load_pins().digest_of("kubernetes")
    assert load_pins(other).digest_of("etcd", "kwok") == load_pins().digest_of("etcd", "kwok")
    assert load_pins(other).kubernetes == "1.36.1"


def test_a_comment_does_not_change_a_key(tmp_path):
    other = tmp_path / "pins.toml"
    other.write_text((REPO_ROOT / "toolchain" / "pins.toml").read_text() + "\n# a note\n")
    assert load_pins(other).digest_of("pulumi") == load_pins().digest_of("pulumi")
