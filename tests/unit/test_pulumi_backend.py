"""scripts/activate's choice of Pulumi backend and secrets (infra/toolchain/backend.py): what a user
chose is kept, the file backend in .state/ only where there is none, one line that says which and
never shows a secret; and Pulumi.yaml's virtualenv, which a pulumi CLI of one's own follows."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.toolchain import backend
from infra.toolchain.pins import REPO_ROOT

TOKEN = "pul-0123456789abcdef-token"
PASSPHRASE = "correct horse battery staple"


def login(home: Path, url: str) -> None:
    """What `pulumi login URL` leaves in a Pulumi home."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "credentials.json").write_text(json.dumps({"current": url, "accessTokens": {url: TOKEN}}))


def test_no_backend_of_ones_own_is_the_local_file_backend_with_a_generated_passphrase(tmp_path: Path) -> None:
    state = tmp_path / "repo" / ".state"
    choice = backend.choose({"PULUMI_HOME": str(tmp_path / "empty-home")}, state)
    assert choice.local and choice.backend == f"file://{state}/pulumi-backend"
    assert choice.exports == {
        "PULUMI_BACKEND_URL": f"file://{state}/pulumi-backend",
        "PULUMI_CONFIG_PASSPHRASE_FILE": str(state / "passphrase"),
        backend.SET_VARIABLE: "PULUMI_BACKEND_URL PULUMI_CONFIG_PASSPHRASE_FILE",
    }
    assert "PULUMI_HOME" not in choice.exports  # a later `pulumi login` lands in the user's own home
    line = choice.line()
    assert "\n" not in line and f"file://{state}/pulumi-backend" in line and "local default" in line
    assert "deleting .state/ deletes these stacks" in line and "pulumi login URL" in line
    backend.apply_files(choice)
    passphrase = state / "passphrase"
    assert stat.S_IMODE(passphrase.stat().st_mode) == 0o600 and len(passphrase.read_text().strip()) >= 32
    first = passphrase.read_text()
    backend.apply_files(backend.choose({"PULUMI_HOME": str(tmp_path / "empty-home")}, state))
    assert passphrase.read_text() == first  # generated once: the stacks' secrets stay readable
    assert (state / "pulumi-backend").is_dir()


def test_a_backend_url_and_passphrase_file_of_ones_own_are_kept(tmp_path: Path) -> None:
    secrets_file = tmp_path / "team" / "passphrase"
    secrets_file.parent.mkdir()
    secrets_file.write_text(PASSPHRASE)
    url = "s3://team-atlas-state?region=us-east-1&endpoint=minio.example.org:9000"
    environ = {"PULUMI_BACKEND_URL": url, "PULUMI_CONFIG_PASSPHRASE_FILE": str(secrets_file)}
    choice = backend.choose(environ, tmp_path / "repo" / ".state")
    assert not choice.local and choice.exports == {} and choice.unset == ()
    assert choice.backend_source == "PULUMI_BACKEND_URL"
    line = choice.line()
    assert "s3://team-atlas-state" in line and str(secrets_file) in line and "PULUMI_CONFIG_PASSPHRASE_FILE" in line
    assert PASSPHRASE not in line and "missing" not in line
    backend.apply_files(choice)
    assert not (tmp_path / "repo").exists()  # nothing made under .state/


def test_a_pulumi_login_is_kept_and_its_token_never_shown(tmp_path: Path) -> None:
    home = tmp_path / "pulumi-home"
    login(home, "https://api.pulumi.com")
    choice = backend.choose({"PULUMI_HOME": str(home), "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}, tmp_path / ".state")
    assert not choice.local and choice.exports == {}
    line = choice.line()
    assert "https://api.pulumi.com" in line and str(home / "credentials.json") in line
    assert "PULUMI_CONFIG_PASSPHRASE" in line and PASSPHRASE not in line and TOKEN not in line
    # Neither a passphrase nor a file: each stack's own provider (a cloud KMS, the service's).
    bare = backend.choose({"PULUMI_HOME": str(home)}, tmp_path / ".state")
    assert "each stack's own provider" in bare.line() and bare.exports == {}


def test_an_access_token_alone_means_pulumi_cloud(tmp_path: Path) -> None:
    environ = {"PULUMI_HOME": str(tmp_path / "empty"), "PULUMI_ACCESS_TOKEN": TOKEN}
    choice = backend.choose(environ, tmp_path / ".state")
    assert (choice.backend, choice.local) == (backend.PULUMI_CLOUD, False)
    assert TOKEN not in choice.line()


def test_the_local_backend_can_be_asked_for_over_ones_own(tmp_path: Path) -> None:
    home = tmp_path / "pulumi-home"
    login(home, "s3://team-atlas-state")
    environ = {"PULUMI_HOME": str(home), backend.FORCE_VARIABLE: "local"}
    choice = backend.choose(environ, tmp_path / ".state")
    assert choice.local and choice.exports["PULUMI_BACKEND_URL"] == f"file://{tmp_path / '.state'}/pulumi-backend"
    assert f"{backend.FORCE_VARIABLE}=local" in choice.line()
    with pytest.raises(ValueError, match=f"{backend.FORCE_VARIABLE}='s3': use `local`"):
        backend.choose({backend.FORCE_VARIABLE: "s3"}, tmp_path / ".state")


def test_sourcing_again_decides_afresh_and_a_value_the_user_changed_is_theirs(tmp_path: Path) -> None:
    state = tmp_path / ".state"
    home = tmp_path / "pulumi-home"
    first = backend.choose({"PULUMI_HOME": str(home)}, state)
    shell = {"PULUMI_HOME": str(home), **first.exports}
    again = backend.choose(shell, state)
    assert again.local and again.exports == first.exports  # its own defaults are not taken for the user's
    login(home, "s3://team-atlas-state")  # the user logs in to a backend of their own
    after_login = backend.choose(shell, state)
    assert not after_login.local and after_login.backend == "s3://team-atlas-state"
    assert set(after_login.unset) == {"PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE_FILE", backend.SET_VARIABLE}
    changed = backend.choose({**shell, "PULUMI_BACKEND_URL": "file:///srv/team-state"}, state)
    assert not changed.local and changed.backend == "file:///srv/team-state"


def test_a_missing_passphrase_file_is_said(tmp_path: Path) -> None:
    environ = {"PULUMI_BACKEND_URL": "file:///srv/state", "PULUMI_CONFIG_PASSPHRASE_FILE": str(tmp_path / "none")}
    assert "(missing: create it, or unset the variable)" in backend.choose(environ, tmp_path).line()


def test_a_backend_url_is_shown_without_its_credentials() -> None:
    shown = backend.redact("https://alex:s3cr3t@state.example.org/atlas?token=abc123&region=x&sas_key=k")
    assert "s3cr3t" not in shown and "abc123" not in shown and "=k" not in shown
    assert shown.startswith("https://alex:***@state.example.org/atlas?") and "region=x" in shown
    environ = {"PULUMI_BACKEND_URL": "azblob://state?storage_key=KEYVALUE"}
    assert "KEYVALUE" not in backend.describe_backend(environ)
    assert "(from PULUMI_BACKEND_URL)" in backend.describe_backend(environ)
    assert backend.describe_backend({"PULUMI_HOME": "/nonexistent"}).startswith("(none:")


def test_the_shell_code_quotes_what_it_sets_and_prints_the_line(tmp_path: Path) -> None:
    state = tmp_path / "a folder with 'quotes'" / ".state"
    choice = backend.choose({"PULUMI_HOME": str(tmp_path / "h")}, state)
    script = backend.shell_code(choice) + 'printf "%s\\n" "$PULUMI_BACKEND_URL" "$PULUMI_CONFIG_PASSPHRASE_FILE"\n'
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout.splitlines() == [f"file://{state}/pulumi-backend", str(state / "passphrase")]
    assert ran.stderr.splitlines() == [choice.line()]


def test_the_login_users_home_is_where_pulumi_looks_not_home(tmp_path: Path) -> None:
    # The pulumi CLI takes its home from the user database (Go's user.Current), not $HOME.
    import pwd

    found = backend.pulumi_home({"HOME": str(tmp_path)})
    assert found == Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"
    assert backend.pulumi_home({"PULUMI_HOME": str(tmp_path)}) == tmp_path


def test_pulumi_yaml_names_the_venv_for_a_pulumi_cli_of_ones_own() -> None:
    # Upstream's language host resolves `virtualenv` against the project's folder, its dynamic-provider
    # launcher (PULUMI_RUNTIME_VIRTUALENV) against the program's: both must reach the one .venv.
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    venv = project["runtime"]["options"]["virtualenv"]
    from_project = REPO_ROOT / venv
    from_program = REPO_ROOT / project["main"] / venv
    assert (from_project / "bin" / "python").is_file(), "scripts/bootstrap builds .venv"
    assert from_program.resolve() == from_project.resolve(), "scripts/bootstrap links stacks/.venv to ../.venv"
    from infra.toolchain import venv as toolchain_venv

    assert from_program == toolchain_venv.PROGRAM_VENV_LINK and from_project == toolchain_venv.VENV_DIR
