"""HPC target validation: hostile and malformed values are refused, naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.hpc.scheduler import SiteDirectives
from infra.hpc.target import HpcConfigError, HpcTarget
from infra.hpc.target_parser import load_known_hosts, parse_hpc_target, validate_remote_path

KNOWN_HOSTS = "[127.0.0.1]:16022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
PREFIX = "atlas:satori"


def good(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "host": "satori-login-001.mit.edu",
        "port": 22,
        "user": "alex",
        "scheduler": "lsf",
        "queue": "normal",
        "known_hosts": KNOWN_HOSTS,
        "private_key": KEY,
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def test_a_good_target() -> None:
    target = parse_hpc_target(good(poll_interval_seconds=90, remote_work_dir="/nobackup/users/alex/atlas"), PREFIX)
    assert isinstance(target, HpcTarget)
    assert (target.host, target.port, target.user, target.scheduler, target.queue) == (
        "satori-login-001.mit.edu",
        22,
        "alex",
        "lsf",
        "normal",
    )
    assert target.poll_interval_s == 90.0 and target.remote_work_dir == "/nobackup/users/alex/atlas"
    assert load_known_hosts(target) == KNOWN_HOSTS
    assert target.known_hosts_source == "inline known_hosts"


def test_secrets_stay_out_of_repr_and_errors() -> None:
    target = parse_hpc_target(good(private_key_passphrase="hunter2-passphrase"), PREFIX)
    assert "AAAA-not-a-real-key" not in repr(target) and "hunter2" not in repr(target)
    with pytest.raises(HpcConfigError) as caught:
        parse_hpc_target(good(private_key="ssh-ed25519 AAAAsecretlooking"), PREFIX)
    assert "AAAAsecretlooking" not in str(caught.value) and "atlas:satori.private_key" in str(caught.value)


def test_key_and_known_hosts_files(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(KNOWN_HOSTS)
    target = parse_hpc_target(
        good(known_hosts=None, known_hosts_file="known_hosts", private_key=None, private_key_file="id"),
        PREFIX,
        project_dir=tmp_path,
    )
    assert target.known_hosts_file == tmp_path / "known_hosts" and target.private_key_file == tmp_path / "id"
    assert load_known_hosts(target) == KNOWN_HOSTS
    missing = parse_hpc_target(good(known_hosts=None, known_hosts_file=str(tmp_path / "nope")), PREFIX)
    with pytest.raises(HpcConfigError, match="cannot be read"):
        load_known_hosts(missing)


def test_the_ssh_config_and_the_agent_may_give_what_the_target_leaves_out(tmp_path: Path) -> None:
    # A Host alias of the user's ssh config, no port, no user, no key, no host keys: infra/hpc/ssh/resolve.py
    # fills them in from the config and the agent (and refuses, naming the fix, what neither gives).
    section = {"host": "satori_login", "scheduler": "slurm", "ssh_config": "ssh/config"}
    target = parse_hpc_target(section, PREFIX, project_dir=tmp_path)
    assert (target.host, target.port, target.user) == ("satori_login", None, None)
    assert (target.known_hosts, target.known_hosts_file, target.private_key, target.private_key_file) == (None,) * 4
    assert not target.has_known_hosts and target.ssh_config == tmp_path / "ssh" / "config"
    with pytest.raises(HpcConfigError, match="gives no known_hosts of its own"):
        load_known_hosts(target)


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        ({"host": "satori; rm -rf ~"}, "atlas:satori.host", "not a host name"),
        ({"host": "$(whoami).example.org"}, "atlas:satori.host", "not a host name"),
        ({"host": "login\nProxyCommand evil"}, "atlas:satori.host", "newline"),
        ({"host": "a" * 300}, "atlas:satori.host", "characters long"),
        ({"host": None}, "atlas:satori.host", "required"),
        ({"port": 0}, "atlas:satori.port", "port number"),
        ({"port": "22; id"}, "atlas:satori.port", "port number"),
        ({"port": True}, "atlas:satori.port", "port number"),
        ({"user": "root;id"}, "atlas:satori.user", "not a login name"),
        ({"user": "-oProxyCommand=x"}, "atlas:satori.user", "not a login name"),
        ({"user": "a" * 40}, "atlas:satori.user", "characters long"),
        ({"scheduler": "pbs"}, "atlas:satori.scheduler", "lsf, slurm"),
        ({"queue": "normal -x"}, "atlas:satori.queue", "not a queue"),
        ({"queue": "`id`"}, "atlas:satori.queue", "not a queue"),
        ({"queue": "q" * 80}, "atlas:satori.queue", "characters long"),
        ({"queue": "normal\n#BSUB -x"}, "atlas:satori.queue", "newline"),
        ({"remote_work_dir": "../../etc"}, "atlas:satori.remote_work_dir", "'..'"),
        ({"remote_work_dir": "runs/../.."}, "atlas:satori.remote_work_dir", "'..'"),
        ({"remote_work_dir": "~/runs"}, "atlas:satori.remote_work_dir", "'~'"),
        ({"remote_work_dir": "runs;id"}, "atlas:satori.remote_work_dir", "characters outside"),
        ({"remote_work_dir": "runs dir"}, "atlas:satori.remote_work_dir", "characters outside"),
        ({"remote_work_dir": "/"}, "atlas:satori.remote_work_dir", "root directory"),
        ({"remote_work_dir": "x" * 300}, "atlas:satori.remote_work_dir", "characters long"),
        ({"known_hosts_file": "/k"}, "atlas:satori.known_hosts", "at most one"),
        ({"known_hosts": "not a key line\n"}, "atlas:satori.known_hosts", "line 1 is not a known_hosts entry"),
        ({"known_hosts": "h ssh-ed25519 !!!notbase64\n"}, "atlas:satori.known_hosts", "not valid base64"),
        ({"known_hosts": "# only a comment\n"}, "atlas:satori.known_hosts", "no host key entries"),
        ({"private_key_file": "id"}, "atlas:satori.private_key", "at most one"),
        ({"host": "-oProxyCommand=x"}, "atlas:satori.host", "not a host name"),
        ({"host": "satori alias"}, "atlas:satori.host", "not a host name"),
        ({"ssh_config": "a\nb"}, "atlas:satori.ssh_config", "newline"),
        ({"private_key_passphrase": "a\nb"}, "atlas:satori.private_key_passphrase", "one-line"),
        ({"poll_interval_seconds": 0.01}, "atlas:satori.poll_interval_seconds", "out of range"),
        ({"poll_interval_seconds": "often"}, "atlas:satori.poll_interval_seconds", "expected a number"),
        ({"lsf_memory_unit": "TB"}, "atlas:satori.lsf_memory_unit", "LSF_UNIT_FOR_LIMITS"),
        ({"scheduler": "slurm", "lsf_memory_unit": "MB"}, "atlas:satori.lsf_memory_unit", "only applies to LSF"),
        ({"hostname": "x"}, "atlas:satori", "unknown key(s) hostname"),
    ],
)
def test_bad_values_are_refused_naming_the_key(changes: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(HpcConfigError) as caught:
        parse_hpc_target(good(**changes), PREFIX)
    text = str(caught.value)
    assert text.startswith(f"{key}:") and message in text, text


# --- scheduler_options: each scheduler reads its own ------------------------------------------


def test_scheduler_options_are_read_by_the_target_s_scheduler_with_defaults_filled_in() -> None:
    assert parse_hpc_target(good(), PREFIX).scheduler_options == {"memory_unit": "MB"}
    gb = parse_hpc_target(good(scheduler_options={"memory_unit": "GB"}), PREFIX)
    assert gb.scheduler_options == {"memory_unit": "GB"}
    # The older spelling still works, and means the same.
    assert parse_hpc_target(good(lsf_memory_unit="GB"), PREFIX).scheduler_options == gb.scheduler_options
    both = good(lsf_memory_unit="GB", scheduler_options={"memory_unit": "GB"})
    assert parse_hpc_target(both, PREFIX).scheduler_options == gb.scheduler_options
    assert parse_hpc_target(good(scheduler="slurm"), PREFIX).scheduler_options == {}
    assert parse_hpc_target(good(scheduler="slurm", scheduler_options={}), PREFIX).scheduler_options == {}


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        (
            {"scheduler_options": {"memory_unit": "TB"}},
            "atlas:satori.scheduler_options.memory_unit",
            "LSF_UNIT_FOR_LIMITS",
        ),
        (
            {"scheduler_options": {"memory": "MB"}},
            "atlas:satori.scheduler_options.memory",
            "use one of: max_array_size, memory_unit",
        ),
        ({"scheduler_options": "MB"}, "atlas:satori.scheduler_options", "expected an object"),
        (
            {"scheduler": "slurm", "scheduler_options": {"memory_unit": "MB"}},
            "atlas:satori.scheduler_options.memory_unit",
            "is not an option of Slurm",
        ),
        (
            {"lsf_memory_unit": "GB", "scheduler_options": {"memory_unit": "MB"}},
            "atlas:satori.lsf_memory_unit",
            "keep scheduler_options.memory_unit alone",
        ),
    ],
)
def test_bad_scheduler_options_are_refused_naming_the_key_and_the_fix(
    changes: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(HpcConfigError) as caught:
        parse_hpc_target(good(**changes), PREFIX)
    text = str(caught.value)
    assert text.startswith(f"{key}:") and message in text and "; " in text, text


def test_not_an_object() -> None:
    with pytest.raises(HpcConfigError, match=r"^atlas:satori: expected an object"):
        parse_hpc_target("satori.mit.edu", PREFIX)


@pytest.mark.parametrize("path", ["runs", "/nobackup/users/a/runs", "a/b/c.d", "runs/"])
def test_good_remote_paths(path: str) -> None:
    assert validate_remote_path(path, "k") == path.rstrip("/")


# --- a site's own directives: account, extra_directives, skip_directives -----------------------


def test_site_directives_are_read_into_the_target() -> None:
    lsf = parse_hpc_target(
        good(account="mit-ml", extra_directives=['-R "select[mem>4000]"', "-x"], skip_directives=["-L", "-g"]), PREFIX
    )
    assert lsf.directives == SiteDirectives(account="mit-ml", extra=('-R "select[mem>4000]"', "-x"), skip=("-L", "-g"))
    slurm = parse_hpc_target(
        good(scheduler="slurm", account="ml", extra_directives=["--qos=high", "-pdebug"], skip_directives=["--n"]),
        PREFIX,
    )
    assert slurm.directives == SiteDirectives(account="ml", extra=("--qos=high", "-pdebug"), skip=("--n",))
    assert parse_hpc_target(good(), PREFIX).directives == SiteDirectives()


SLURM = {"scheduler": "slurm"}


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        # account: one plain name
        ({"account": ""}, "atlas:satori.account", "non-empty string"),
        ({"account": 7}, "atlas:satori.account", "non-empty string"),
        ({"account": "ml\n#BSUB -x"}, "atlas:satori.account", "newline"),
        ({"account": "ml lab"}, "atlas:satori.account", "not an account or project name"),
        ({"account": "$(id)"}, "atlas:satori.account", "not an account or project name"),
        ({"account": "a" * 200}, "atlas:satori.account", "characters long"),
        ({**SLURM, "account": "ml;id"}, "atlas:satori.account", "it becomes --account"),
        # extra_directives: a list of one-line options with plain values
        ({"extra_directives": "--qos=high"}, "atlas:satori.extra_directives", "write a list"),
        ({"extra_directives": ["-x"] * 40}, "atlas:satori.extra_directives", "at most 32"),
        ({"extra_directives": [""]}, "atlas:satori.extra_directives[0]", "non-empty string"),
        ({"extra_directives": [3]}, "atlas:satori.extra_directives[0]", "non-empty string"),
        ({"extra_directives": ["-x", "-q a\nrm -rf ~"]}, "atlas:satori.extra_directives[1]", "newline"),
        ({"extra_directives": ["-x\r"]}, "atlas:satori.extra_directives[0]", "control character"),
        ({"extra_directives": ["-R " + "a" * 300]}, "atlas:satori.extra_directives[0]", "characters long"),
        ({"extra_directives": ["#BSUB -x"]}, "atlas:satori.extra_directives[0]", "Atlas adds `#BSUB `"),
        ({**SLURM, "extra_directives": ["#SBATCH --qos=a"]}, "atlas:satori.extra_directives[0]", "`#SBATCH `"),
        ({"extra_directives": ["qos=high"]}, "atlas:satori.extra_directives[0]", "is not an option"),
        ({"extra_directives": ["-P $(id)"]}, "atlas:satori.extra_directives[0]", "contains $"),
        ({"extra_directives": ["-P `id`"]}, "atlas:satori.extra_directives[0]", "contains `"),
        ({"extra_directives": ["-x; id"]}, "atlas:satori.extra_directives[0]", "contains ;"),
        ({"extra_directives": ["-P a\\b"]}, "atlas:satori.extra_directives[0]", "contains \\"),
        ({"extra_directives": ["-x # note"]}, "atlas:satori.extra_directives[0]", "contains #"),
        ({"extra_directives": ["-R select[mem>4000]"]}, "atlas:satori.extra_directives[0]", "bare '>'"),
        ({**SLURM, "extra_directives": ["--constraint=a|b"]}, "atlas:satori.extra_directives[0]", "bare '|'"),
        ({"extra_directives": ["-x && id"]}, "atlas:satori.extra_directives[0]", "bare '&'"),
        ({"extra_directives": ['-R "span[ptile=1]']}, "atlas:satori.extra_directives[0]", "unclosed"),
        ({"extra_directives": ["-J other"]}, "atlas:satori.extra_directives[0]", "finds its jobs by this name"),
        ({"extra_directives": ["-o other.log"]}, "atlas:satori.extra_directives[0]", "reads each step's log"),
        ({"extra_directives": ["-w done(1)"]}, "atlas:satori.extra_directives[0]", "bare '('"),
        ({"extra_directives": ['-w "done(1)"']}, "atlas:satori.extra_directives[0]", "dependencies of its own"),
        ({**SLURM, "extra_directives": ["--job-name=x"]}, "atlas:satori.extra_directives[0]", "by this name"),
        ({**SLURM, "extra_directives": ["-Jx"]}, "atlas:satori.extra_directives[0]", "-J is Atlas's own"),
        ({**SLURM, "extra_directives": ["--error=e.log"]}, "atlas:satori.extra_directives[0]", "errors"),
        ({**SLURM, "extra_directives": ["--array=1-4"]}, "atlas:satori.extra_directives[0]", "one job per step"),
        # skip_directives: options (or their start) of what Atlas writes, never its own bookkeeping
        ({"skip_directives": "-R"}, "atlas:satori.skip_directives", "write a list"),
        ({"skip_directives": ["R"]}, "atlas:satori.skip_directives[0]", "not an option name"),
        ({"skip_directives": ["-"]}, "atlas:satori.skip_directives[0]", "not an option name"),
        ({"skip_directives": ["#BSUB -R"]}, "atlas:satori.skip_directives[0]", "not an option name"),
        ({"skip_directives": ["-R\n"]}, "atlas:satori.skip_directives[0]", "control character"),
        ({"skip_directives": ["--mem"]}, "atlas:satori.skip_directives[0]", "names no directive Atlas writes for LSF"),
        ({**SLURM, "skip_directives": ["-R"]}, "atlas:satori.skip_directives[0]", "for Slurm"),
        ({"skip_directives": ["-J"]}, "atlas:satori.skip_directives[0]", "leave out -J"),
        ({"skip_directives": ["-o"]}, "atlas:satori.skip_directives[0]", "leave out -o"),
        ({**SLURM, "skip_directives": ["--job"]}, "atlas:satori.skip_directives[0]", "leave out --job-name"),
        ({**SLURM, "skip_directives": ["--o"]}, "atlas:satori.skip_directives[0]", "leave out --output"),
        ({**SLURM, "lsf_memory_unit": "MB"}, "atlas:satori.lsf_memory_unit", "remove it for a Slurm target"),
    ],
)
def test_bad_site_directives_are_refused_naming_the_key_and_the_fix(
    changes: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(HpcConfigError) as caught:
        parse_hpc_target(good(**changes), PREFIX)
    text = str(caught.value)
    assert text.startswith(f"{key}:") and message in text and "; " in text, text


@pytest.mark.parametrize(
    ("scheduler", "extra"),
    [
        ("lsf", '-R "select[ngpus>0] rusage[ngpus_excl_p=1]"'),
        ("lsf", "-app gpu_app"),
        ("lsf", "-G ml_group"),
        ("lsf", "-x"),
        ("lsf", "-outdir /scratch/u/%J"),  # not -o: its own option
        ("slurm", "--qos=high"),
        ("slurm", "--constraint='v100&ib'"),
        ("slurm", "--mail-type=END,FAIL"),
        ("slurm", "--exclusive"),
        ("slurm", "-C v100"),
        ("slurm", "--gpus-per-task=1"),
    ],
)
def test_extra_directives_sites_write(scheduler: str, extra: str) -> None:
    target = parse_hpc_target(good(scheduler=scheduler, extra_directives=[extra]), PREFIX)
    assert target.directives.extra == (extra,)
