"""Apptainer on the HPC side, the pure parts: image references by digest, the architecture check,
the login node's answers, the exec line in job and array scripts, the runtime config's errors,
the SIF cache's listing and pruning, and the conversion script run by bash against a fake
`apptainer` (its lock and rename: one conversion however many callers, nothing partial left)."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from infra.cli.sif_cache import CachedSif, list_script, parse_listing, prune_script, to_prune
from infra.hpc.apptainer import (
    EXIT_PULL_FAILED,
    RUN_DIR_SIF,
    ApptainerError,
    ContainerExec,
    check_architecture,
    ensure_sif_script,
    oci_architecture,
    parse_conversion,
    parse_image_reference,
    parse_probe,
    plain_http_registries,
    remote_plain_http,
    sif_name,
)
from infra.hpc.job_script import SubmissionKey, step_scripts, sweep_scripts
from infra.hpc.providers.apptainer_image import refuse_remote_plain_http
from infra.hpc.registry import scheduler_for
from infra.hpc.target import HpcConfigError
from infra.hpc.target_parser import parse_hpc_target
from infra.toolchain.pins import REPO_ROOT
from infra.workload.load import load_workload

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository"),
    [
        (f"127.0.0.1:16510/atlas-local/probe@{DIGEST}", "127.0.0.1:16510", "atlas-local/probe"),
        (f"quay.io/alex/biggan:v1@{DIGEST}", "quay.io", "alex/biggan"),
        (f"python@{DIGEST}", "docker.io", "library/python"),
        (f"alex/biggan@{DIGEST}", "docker.io", "alex/biggan"),
        (f"localhost/x@{DIGEST}", "localhost", "x"),
    ],
)
def test_references_by_digest(text: str, registry: str, repository: str) -> None:
    image = parse_image_reference(text, "key")
    assert (image.registry, image.repository, image.digest) == (registry, repository, DIGEST)
    assert image.docker_uri == f"docker://{registry}/{repository}@{DIGEST}"
    assert image.sif_name == f"sha256-{'ab' * 32}.sif"


@pytest.mark.parametrize("text", ["quay.io/alex/biggan:v1", "quay.io/alex/biggan@sha256:abc", "", "a b@" + DIGEST])
def test_a_reference_without_its_digest_is_refused_naming_the_key(text: str) -> None:
    with pytest.raises(ApptainerError, match=r"^atlas:hpc\.s\.apptainer\.image: .*by digest"):
        parse_image_reference(text, "atlas:hpc.s.apptainer.image")


def test_the_site_reaches_the_registry_by_another_name() -> None:
    image = parse_image_reference(f"image-registry.openshift-image-registry.svc:5000/ns/x@{DIGEST}", "k")
    assert image.on_registry("route.apps.example.org").pinned == f"route.apps.example.org/ns/x@{DIGEST}"
    assert image.on_registry(None) is image


@pytest.mark.parametrize(("machine", "arch"), [("x86_64", "amd64"), ("ppc64le", "ppc64le"), ("aarch64", "arm64"),
                                               ("riscv64", "riscv64")])
def test_machine_names_as_oci_names_them(machine: str, arch: str) -> None:
    assert oci_architecture(machine + "\n") == arch


def test_an_image_for_another_architecture_is_refused_with_the_fix() -> None:
    image = parse_image_reference(f"quay.io/alex/biggan@{DIGEST}", "k")
    check_architecture(image, ("ppc64le",), "ppc64le", "satori")  # Satori and a ppc64le image: fine
    check_architecture(image, ("amd64", "ppc64le"), "ppc64le", "satori")  # an index with a ppc64le build
    with pytest.raises(ApptainerError) as refused:
        check_architecture(image, ("amd64",), "ppc64le", "satori")
    message = str(refused.value)
    assert "built for linux/amd64" in message and "login node is ppc64le" in message
    assert "nothing was submitted" in message
    assert "Fix: build the image for linux/ppc64le" in message and "atlas:hpc.satori.runtime: bare" in message


def test_sif_names_need_a_sha256_digest() -> None:
    with pytest.raises(ValueError, match="not a sha256 digest"):
        sif_name("md5:abc")


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("x86_64\napptainer version 1.4.0\n", ("x86_64", "1.4.0")),
        ("Welcome to Satori\nppc64le\napptainer version 1.3.6-1.el8\n", ("ppc64le", "1.3.6-1.el8")),
    ],
)
def test_the_login_nodes_answer(stdout: str, expected: tuple[str, str]) -> None:
    assert parse_probe(stdout) == expected


def test_the_exec_line_binds_the_run_directory_and_asks_for_gpus_only_where_the_step_does() -> None:
    container = ContainerExec(binds=("/nobackup/users/alex",))
    cpu = container.script_lines(False, "python3 -m x")
    gpu = container.script_lines(True, "python3 -m x")
    assert cpu[-2:] == [
        "atlas_command=(python3 -m x)",
        f'apptainer exec --bind /nobackup/users/alex --bind "$PWD" --pwd "$PWD" {RUN_DIR_SIF} "${{atlas_command[@]}}"',
    ]
    assert gpu[-1].startswith("apptainer exec --nv ")
    # The image's Python, not the user's ~/.local packages; set for inside the container only.
    assert cpu[0] == "export APPTAINERENV_PYTHONNOUSERSITE=1"
    # A pruned SIF fails the step with why, before Apptainer's own message.
    assert cpu[1] == f"if [ ! -r {RUN_DIR_SIF} ]; then" and "pruned" in cpu[2] and cpu[3].strip() == "exit 1"


def _probe_workload():
    return load_workload(REPO_ROOT / "workloads" / "probe" / "workload.yaml", REPO_ROOT)


@pytest.mark.parametrize("scheduler", ["lsf", "slurm"])
def test_job_scripts_run_the_sampler_and_the_step_in_the_image(scheduler: str) -> None:
    run = SubmissionKey("atlas", "local", "satori", "1", "atlas-runs/local/satori/probe")
    workload = _probe_workload()
    bare = step_scripts(workload, scheduler_for(scheduler), run, "normal")
    boxed = step_scripts(workload, scheduler_for(scheduler), run, "normal", container=ContainerExec())
    for step, script in boxed.items():
        bare_lines, lines = bare[step].script.splitlines(), script.script.splitlines()
        # Everything before the command is the same; the command itself is unchanged, on a line
        # of its own (what preview shows), run in the image.
        assert lines[: len(bare_lines) - 1] == bare_lines[:-1]
        assert lines[-2] == f"atlas_command=({bare_lines[-1]})"
        assert lines[-1].startswith("apptainer exec ")
        assert lines[-1].endswith(f'{RUN_DIR_SIF} "${{atlas_command[@]}}"')


def test_array_scripts_run_each_point_in_the_image() -> None:
    run = SubmissionKey("atlas", "local", "satori", "1", "atlas-runs/local/satori/sweep")
    workload = load_workload(REPO_ROOT / "tests" / "e2e" / "sweep" / "workload" / "workload.yaml", REPO_ROOT)
    arrays = sweep_scripts(workload, scheduler_for("slurm"), run, "normal", container=ContainerExec())
    assert arrays
    for sweep in arrays.values():
        for script in sweep.scripts:
            *_, command, last = script.script.splitlines()
            assert last.startswith("apptainer exec ") and last.endswith(f'{RUN_DIR_SIF} "${{atlas_command[@]}}"')
            assert command.startswith("atlas_command=(python3 -m infra.telemetry.sampler --out \"$atlas_telemetry\"")


BASE = {"host": "login.example.org", "user": "alex", "scheduler": "slurm"}


def test_runtime_defaults_to_bare_and_apptainer_defaults_fill_in() -> None:
    assert parse_hpc_target(BASE, "atlas:hpc.s").runtime == "bare"
    target = parse_hpc_target({**BASE, "runtime": "apptainer"}, "atlas:hpc.s")
    assert target.apptainer is not None
    assert (target.apptainer.command, target.apptainer.cache_dir, target.apptainer.source) == (
        "apptainer", ".atlas/sif", "site"
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"runtime": "docker"}, "atlas:hpc.s.runtime: 'docker' is not a runtime; use one of bare, apptainer"),
        ({"apptainer": {}}, "atlas:hpc.s.apptainer: is set, but runtime is bare; set runtime: apptainer"),
        ({"runtime": "apptainer", "apptainer": {"image": "quay.io/a/b:1"}},
         "atlas:hpc.s.apptainer.image: 'quay.io/a/b:1' does not name its image by digest"),
        ({"runtime": "apptainer", "apptainer": {"command": "apptainer; rm -rf ~"}},
         "atlas:hpc.s.apptainer.command: 'apptainer; rm -rf ~' is not a command name or path"),
        ({"runtime": "apptainer", "apptainer": {"binds": ["relative"]}},
         "atlas:hpc.s.apptainer.binds: ['relative'] is not a list of absolute folders"),
        ({"runtime": "apptainer", "apptainer": {"image_arch": "x86_64"}},
         "atlas:hpc.s.apptainer.image_arch: 'x86_64' is not an architecture; use amd64"),
        ({"runtime": "apptainer", "apptainer": {"pull_registry": "https://quay.io"}},
         "atlas:hpc.s.apptainer.pull_registry: 'https://quay.io' is not a registry host"),
    ],
)
def test_bad_runtime_config_names_the_key_and_the_fix(section: dict, message: str) -> None:
    with pytest.raises(HpcConfigError) as refused:
        parse_hpc_target({**BASE, **section}, "atlas:hpc.s")
    assert message in str(refused.value)


LOCAL_IMAGE = f"127.0.0.1:16510/atlas/probe@{DIGEST}"
REMOTE_IMAGE = f"quay.io/atlas/probe@{DIGEST}"


@pytest.mark.parametrize(
    ("image_registry", "pull_registry", "source", "image_arch", "expected", "remote"),
    [
        # the local environment: both read and pull from the loopback registry
        ("127.0.0.1:16510", None, "site", None,
         [("this machine", "127.0.0.1:16510"), ("the login node", "127.0.0.1:16510")], None),
        # the image's architecture given: this machine reads nothing; the site still pulls
        ("quay.io", None, "site", "amd64", [("the login node", "quay.io")], ("the login node", "quay.io")),
        # the site pulls through another name: that name is the one spoken to
        ("quay.io", "localhost:5000", "site", "amd64", [("the login node", "localhost:5000")], None),
        ("quay.io", "localhost:5000", "site", None,
         [("this machine", "quay.io"), ("the login node", "localhost:5000")], ("this machine", "quay.io")),
        # `source: here`: this machine pulls from the image's registry whatever image_arch says
        ("localhost.example.com", None, "here", "amd64", [("this machine", "localhost.example.com")],
         ("this machine", "localhost.example.com")),
        ("[::1]:5000", "quay.io", "here", None, [("this machine", "[::1]:5000")], None),
        # the image not known yet (the OpenShift side's): only pull_registry is checked now
        (None, "127.0.0.1.nip.io:5000", "site", None, [("the login node", "127.0.0.1.nip.io:5000")],
         ("the login node", "127.0.0.1.nip.io:5000")),
        (None, None, "site", None, [], None),
    ],
)
def test_plain_http_is_spoken_only_to_loopback_registries(
    image_registry: str | None, pull_registry: str | None, source: str, image_arch: str | None,
    expected: list[tuple[str, str]], remote: tuple[str, str] | None,
) -> None:
    assert plain_http_registries(image_registry, pull_registry, source, image_arch) == expected
    assert remote_plain_http(image_registry, pull_registry, source, image_arch) == remote


@pytest.mark.parametrize(
    ("apptainer", "refused"),
    [
        ({"plain_http": True, "image": LOCAL_IMAGE}, None),
        ({"plain_http": True}, None),  # the OpenShift side's image: the provider checks it (below)
        ({"plain_http": False, "image": REMOTE_IMAGE}, None),
        ({"plain_http": True, "image": REMOTE_IMAGE},
         "atlas:hpc.s.apptainer.plain_http: true, but this machine would pull from quay.io over plain HTTP"),
        ({"plain_http": True, "image": f"localhost.example.com/a@{DIGEST}"},
         "from localhost.example.com over plain HTTP, and localhost.example.com is not this machine's loopback"),
        ({"plain_http": True, "image": LOCAL_IMAGE, "pull_registry": "registry.example.org"},
         "atlas:hpc.s.apptainer.plain_http: true, but the login node would pull from registry.example.org"),
    ],
)
def test_plain_http_config_is_refused_off_loopback(apptainer: dict, refused: str | None) -> None:
    section = {**BASE, "runtime": "apptainer", "apptainer": apptainer}
    if refused is None:
        assert parse_hpc_target(section, "atlas:hpc.s").apptainer is not None
        return
    with pytest.raises(HpcConfigError) as error:
        parse_hpc_target(section, "atlas:hpc.s")
    assert refused in str(error.value)
    assert "remove plain_http (the registry speaks HTTPS)" in str(error.value)


def test_the_provider_refuses_plain_http_to_the_openshift_sides_remote_image_before_connecting() -> None:
    props = {"environment": "s", "plain_http": True, "source": "site", "pull_registry": None, "image_arch": None}
    with pytest.raises(ApptainerError) as refused:
        refuse_remote_plain_http(parse_image_reference(REMOTE_IMAGE, "k"), props)
    assert str(refused.value).startswith(
        f"atlas:hpc.s.apptainer.plain_http: true, but this machine would pull {REMOTE_IMAGE} from quay.io over plain "
        "HTTP")
    refuse_remote_plain_http(parse_image_reference(LOCAL_IMAGE, "k"), props)  # loopback: allowed
    refuse_remote_plain_http(parse_image_reference(REMOTE_IMAGE, "k"), {**props, "plain_http": False})


# --- the conversion script, run by bash against a fake apptainer -----------------------------------


@pytest.fixture
def fake_apptainer(tmp_path: Path) -> Path:
    """`apptainer pull DEST URI`: takes a moment as a conversion does (so callers overlap), writes
    DEST, counts its runs; it fails for a URI containing "missing", as Apptainer does for an
    unknown manifest."""
    script = tmp_path / "apptainer"
    script.write_text(
        "#!/bin/bash\n"
        f'echo run >> {tmp_path}/runs\n'
        'case "$*" in *missing*) echo "FATAL: manifest unknown" >&2; exit 255;; esac\n'
        'sleep 0.5\n'
        'for last; do :; done\n'
        'dest="${@: -2:1}"\n'
        'printf "SIF of %s" "$last" > "$dest"\n'
    )
    script.chmod(0o755)
    return script


def _ensure(fake: Path, home: Path, reference: str) -> subprocess.CompletedProcess[str]:
    image = parse_image_reference(reference, "k")
    script = ensure_sif_script(str(fake), "cache", image, plain_http=True, stack="s1")
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=False, timeout=60)


def test_concurrent_conversions_convert_once(fake_apptainer: Path, tmp_path: Path) -> None:
    reference = f"127.0.0.1:5000/x@{DIGEST}"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _ensure(fake_apptainer, tmp_path, reference), range(4)))
    assert [r.returncode for r in results] == [0, 0, 0, 0], [r.stderr for r in results]
    found = [parse_conversion(r.stdout) for r in results]
    assert sorted(f.converted for f in found) == [False, False, False, True]
    assert len({(f.seconds, f.converted_at, f.by) for f in found}) == 1 and found[0].by == "s1"
    assert (tmp_path / "runs").read_text().count("run") == 1
    cache = tmp_path / "cache"
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [sif_name(DIGEST), f"{sif_name(DIGEST)}.json", f".{sif_name(DIGEST)}.lock"]
    )
    assert (cache / sif_name(DIGEST)).read_text() == f"SIF of docker://127.0.0.1:5000/x@{DIGEST}"
    assert "--no-https" in ensure_sif_script("apptainer", "c", parse_image_reference(reference, "k"), True, "s")
    assert "--no-https" not in ensure_sif_script("apptainer", "c", parse_image_reference(reference, "k"), False, "s")


def test_a_failed_pull_leaves_nothing_under_the_digest_and_says_why(fake_apptainer: Path, tmp_path: Path) -> None:
    done = _ensure(fake_apptainer, tmp_path, f"127.0.0.1:5000/missing@{DIGEST}")
    assert done.returncode == EXIT_PULL_FAILED
    assert "FATAL: manifest unknown" in done.stderr
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f".{sif_name(DIGEST)}.lock"]
    # A SIF without its record (a conversion cut short before the record) is converted again.
    (tmp_path / "cache" / sif_name(DIGEST)).write_text("torn")
    again = _ensure(fake_apptainer, tmp_path, f"127.0.0.1:5000/x@{DIGEST}")
    assert parse_conversion(again.stdout).converted
    assert (tmp_path / "cache" / sif_name(DIGEST)).read_text().startswith("SIF of")


# --- the SIF cache: listing and pruning ------------------------------------------------------------


def test_the_listing_reads_each_sif_and_skips_what_is_not_one() -> None:
    record = json.dumps({"seconds": 41.25, "converted_at": "2026-12-05T17:00:00Z", "by": "local"})
    stdout = f"Welcome\nsha256-aa.sif\t1048576\t{record}\t1\nsha256-bb.sif\t10\t-\t0\n"
    assert parse_listing(stdout) == [
        CachedSif("sha256-aa.sif", 1048576, 41.25, "2026-12-05T17:00:00Z", "local", True),
        CachedSif("sha256-bb.sif", 10, None, "", "", False),
    ]


def test_pruning_keeps_what_a_run_directory_links_to_unless_everything_goes() -> None:
    cached = [CachedSif("a.sif", 1, None, "", "", True), CachedSif("b.sif", 1, None, "", "", False)]
    assert to_prune(cached, everything=False) == ["b.sif"]
    assert to_prune(cached, everything=True) == ["a.sif", "b.sif"]


def test_list_and_prune_against_a_real_folder(tmp_path: Path) -> None:
    cache, runs = tmp_path / "sif", tmp_path / "runs"
    (runs / "local" / "satori" / "probe" / ".atlas").mkdir(parents=True)
    cache.mkdir()
    for name in ("sha256-aa.sif", "sha256-bb.sif"):
        (cache / name).write_text("x" * 3)
        (cache / f"{name}.json").write_text('{"seconds": 2.5, "converted_at": "t", "by": "local"}\n')
    (runs / "local" / "satori" / "probe" / ".atlas" / "image.sif").symlink_to(cache / "sha256-aa.sif")
    env = {**os.environ, "HOME": str(tmp_path)}

    def bash(script: str) -> str:
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True).stdout

    listed = parse_listing(bash(list_script("sif", "runs")))
    assert [(c.name, c.size_bytes, c.seconds, c.in_use) for c in listed] == [
        ("sha256-aa.sif", 3, 2.5, True), ("sha256-bb.sif", 3, 2.5, False),
    ]
    assert bash(prune_script("sif", to_prune(listed, everything=False))).split() == ["removed", "sha256-bb.sif"]
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [
        "sha256-aa.sif", "sha256-aa.sif.json"
    ]


def test_the_listing_says_size_conversion_and_use() -> None:
    from infra.cli.sif_cache import render

    text = render("satori", ".atlas/sif", [
        CachedSif("sha256-aa.sif", 202_371_072, 183.282, "2026-12-05T17:33:49Z", "local", True),
        CachedSif("sha256-bb.sif", 10, None, "", "", False),
    ])
    assert text.splitlines() == [
        "satori: .atlas/sif (2 SIFs)",
        "  sha256-aa.sif  202.4 MB  converted in 183.3 s, 2026-12-05T17:33:49Z, by local  in use",
        "  sha256-bb.sif  0.0 MB  conversion not recorded (made outside Atlas)  not in use",
    ]


def test_the_command_reaches_apptainer_word_for_word(tmp_path: Path) -> None:
    """The script's last lines run by bash with a fake `apptainer` that prints its arguments: the
    command's words (quoted spaces, expansions) arrive as the bare script would pass them."""
    fake = tmp_path / "apptainer"
    fake.write_text('#!/bin/bash\nprintf "[%s]\\n" "$@"\n')
    fake.chmod(0o755)
    (tmp_path / ".atlas").mkdir()
    (tmp_path / ".atlas" / "image.sif").write_text("sif")
    lines = ContainerExec(command=str(fake)).script_lines(True, "python3 -m x --name 'two words' \"$POINT\"")
    done = subprocess.run(["bash", "-c", "\n".join(lines)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "POINT": "p 1"}, check=True)
    assert done.stdout.splitlines() == [
        "[exec]", "[--nv]", "[--bind]", f"[{tmp_path}]", "[--pwd]", f"[{tmp_path}]", f"[{RUN_DIR_SIF}]",
        "[python3]", "[-m]", "[x]", "[--name]", "[two words]", "[p 1]",
    ]
