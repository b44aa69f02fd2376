"""The toolchain pins and the Python SDK pins must name the same versions; the exact pins CI
installs with (constraints.txt) lie within pyproject.toml's ranges and cover every dependency."""

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infra.toolchain.pins import REPO_ROOT, load_pins


def _constraint_pins() -> dict[str, str]:
    """constraints.txt's `name==version` lines, by canonical name."""
    pins = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    return [Requirement(d) for d in [*project["dependencies"], *(d for group in extras.values() for d in group)]]


def test_pulumi_cli_and_sdk_versions_agree():
    pins = load_pins()
    deps = _constraint_pins()
    assert deps["pulumi"] == pins.pulumi
    assert deps["pulumi-kubernetes"] == pins.pulumi_kubernetes


def test_the_sdks_ranges_stay_on_the_cli_and_provider_major():
    pins = load_pins()
    declared = {canonicalize_name(r.name): r.specifier for r in _declared()}
    for name, version in (("pulumi", pins.pulumi), ("pulumi-kubernetes", pins.pulumi_kubernetes)):
        major = int(version.split(".")[0])
        assert version in declared[name]
        assert f"{major + 1}.0.0" not in declared[name], f"{name}: the range must stop below the next major"


def test_every_declared_dependency_is_pinned_within_its_range():
    pins = _constraint_pins()
    # Type stubs and packaging follow whatever mypy and pytest bring; everything else is pinned.
    unpinned_allowed = {"types-pyyaml", "types-paramiko", "packaging"}
    missing, outside = [], []
    for requirement in _declared():
        name = canonicalize_name(requirement.name)
        if name not in pins:
            if name not in unpinned_allowed:
                missing.append(name)
        elif pins[name] not in requirement.specifier:
            outside.append(f"{name}=={pins[name]} not in {requirement.specifier}")
    assert missing == [] and outside == []


def test_the_constraints_pin_only_what_the_project_declares():
    declared = {canonicalize_name(r.name) for r in _declared()}
    assert set(_constraint_pins()) - declared == set()


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
