"""`SifImage`: the run's image as a SIF on the site, for steps that run under Apptainer.

create/update, in this order, before any step of the environment is submitted (its jobs depend
on it):
1. ask the login node its machine (`uname -m`) and Apptainer's version; Apptainer missing is an
   error naming the key and the fix;
2. read the image's architectures from its registry (or `image_arch`) and refuse a mismatch;
3. make the SIF once per digest in the cache on the shared filesystem: the login node pulls and
   converts it under a lock (`source: site`), or this machine does and stages it over SFTP
   (`source: here`); a failed pull ends here with Apptainer's own message;
4. point the run directory's `.atlas/image.sif` at it, which every job script names.
The conversion's wall time is recorded beside the SIF by whoever converted it, so the report
shows it once, apart from the steps' times, however many steps and stacks use the image.

delete removes the run directory's link only: the SIF cache is a cache, not a resource of the
stack; `scripts/sif-cache` lists and prunes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed
from infra.hpc import ssh
from infra.hpc.apptainer import (
    EXIT_LOCK_TIMEOUT,
    EXIT_NO_CACHE_DIR,
    EXIT_PULL_FAILED,
    LOCK_TIMEOUT_S,
    RUN_DIR_SIF,
    ApptainerError,
    Conversion,
    ImageReference,
    check_architecture,
    conversion_of,
    ensure_sif_script,
    oci_architecture,
    parse_conversion,
    parse_image_reference,
    parse_probe,
    probe_command,
    registry_architectures,
    remote_plain_http,
    searched_path,
)
from infra.hpc.provider_inputs import check_remote_dir, check_ssh, endpoint_from, same_login
from infra.hpc.providers.common import HpcProviderError, SshResource, join_remote, over_ssh
from infra.hpc.remote import remote_path_expression

# Inputs whose change makes another SIF (or another link): create's work again, in place.
IMAGE_INPUTS = ("image", "command", "cache_dir", "source", "pull_registry", "plain_http", "image_arch", "run_dir")
OUTPUTS = ("digest", "sif", "arch", "machine", "apptainer_version", "conversion")
PULL_TIMEOUT_S = 3600.0


def _where(props: Mapping[str, Any]) -> str:
    return f"atlas:hpc.{props['environment']}"


def _probe(conn: ssh.PooledConnection, props: Mapping[str, Any]) -> tuple[str, str]:
    command = str(props["command"])
    result = ssh.run_remote(conn, probe_command(command), check=False, safe_to_retry=True)
    if result.exit_code == 127:
        searched = searched_path(result.stdout)
        raise ApptainerError(
            f"{_where(props)}.runtime is apptainer, but {command!r} is not found on {conn.endpoint.address} "
            f"({searched}); nothing was submitted. Fix: install Apptainer there or load its module in the login "
            f"shell's profile, give its path as {_where(props)}.apptainer.command, or set "
            f"{_where(props)}.runtime: bare"
        )
    if result.exit_code != 0:
        raise HpcProviderError(
            f"asking {conn.endpoint.address} for its machine and Apptainer failed (exit {result.exit_code}): "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    return parse_probe(result.stdout)


def _image_architectures(image: ImageReference, props: Mapping[str, Any]) -> tuple[str, ...]:
    if props.get("image_arch"):
        return (str(props["image_arch"]),)
    return registry_architectures(image, bool(props.get("plain_http")))


def _convert_on_site(conn: ssh.PooledConnection, image: ImageReference, props: Mapping[str, Any]) -> dict[str, Any]:
    pulled = image.on_registry(props.get("pull_registry"))
    script = ensure_sif_script(
        str(props["command"]), str(props["cache_dir"]), pulled, bool(props.get("plain_http")), str(props["stack"])
    )
    # Safe to repeat: the lock and the rename make a second run find the SIF the first made.
    result = ssh.run_remote(
        conn, f"bash -c {shlex.quote(script)}", check=False, safe_to_retry=True, timeout=PULL_TIMEOUT_S
    )
    _raise_for(result, conn, pulled, props)
    return _outputs_of(parse_conversion(result.stdout))


def _raise_for(result: ssh.RemoteResult, conn: ssh.PooledConnection, image: ImageReference,
               props: Mapping[str, Any]) -> None:
    if result.exit_code == 0:
        return
    where = f"{_where(props)}.apptainer.cache_dir"
    if result.exit_code == EXIT_PULL_FAILED:
        raise ApptainerError(
            f"apptainer pull of {image.pinned} on {conn.endpoint.address} failed; no step was submitted. "
            f"Apptainer said:\n{result.stderr.strip()}\nFix: check that the site reaches the registry "
            f"({_where(props)}.apptainer.pull_registry, plain_http), or convert it here and stage it "
            f"({_where(props)}.apptainer.source: here)"
        )
    if result.exit_code == EXIT_NO_CACHE_DIR:
        raise ApptainerError(
            f"cannot write the SIF cache {props['cache_dir']} on {conn.endpoint.address}: "
            f"{result.stderr.strip()}; point {where} at a folder the login user may write"
        )
    if result.exit_code == EXIT_LOCK_TIMEOUT:
        raise ApptainerError(
            f"another conversion of {image.pinned} in {props['cache_dir']} held its lock for an hour; "
            "run `pulumi up` again once it ends (or remove a stale .lock file beside it)"
        )
    raise ssh.RemoteCommandError("ensure SIF", result.exit_code, result.stdout, result.stderr,
                                 conn.endpoint.address)


def _outputs_of(found: Conversion) -> dict[str, Any]:
    return {
        "converted_now": found.converted,
        "seconds": found.seconds,
        "converted_at": found.converted_at,
        "by": found.by,
    }


def local_sif_cache() -> Path:
    """Where `source: here` keeps the SIFs it converts, beside the toolchain."""
    from infra.toolchain.pins import cache_root

    return cache_root() / "sif"


def _convert_here(conn: ssh.PooledConnection, image: ImageReference, props: Mapping[str, Any]) -> dict[str, Any]:
    """`source: here`: this machine converts (once per digest, under its own lock) and stages the
    SIF into the site's cache, renamed into place under the site's lock unless it is there already."""
    folder = local_sif_cache()
    folder.mkdir(parents=True, exist_ok=True)
    local = folder / image.sif_name
    with (folder / f".{image.sif_name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not local.is_file():
            partial = folder / f"{image.sif_name}.partial.{os.getpid()}"
            argv = [_local_apptainer(), "pull"]
            if props.get("plain_http"):
                argv.append("--no-https")
            started = time.monotonic()
            done = subprocess.run([*argv, str(partial), image.docker_uri], capture_output=True, text=True,
                                  check=False, timeout=PULL_TIMEOUT_S)
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                raise ApptainerError(
                    f"apptainer pull of {image.pinned} on this machine failed; no step was submitted. Apptainer "
                    f"said:\n{(done.stderr or done.stdout).strip()}"
                )
            record = {"seconds": round(time.monotonic() - started, 3),
                      "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "by": str(props["stack"])}
            os.replace(partial, local)
            Path(f"{local}.json").write_text(json.dumps(record) + "\n")
    cache = str(props["cache_dir"])
    name = image.sif_name
    record_file = f"{remote_path_expression(cache)}/{shlex.quote(name)}.json"
    present = ssh.run_remote(conn, f"test -s {record_file}", check=False, safe_to_retry=True)
    if present.exit_code != 0:
        ssh.make_directories(conn, [cache])
        home = ssh.run_remote(conn, 'printf %s "$HOME"', safe_to_retry=True).stdout.strip()
        target = cache if cache.startswith("/") else f"{home}/{cache}"
        staged = f"{target}/{name}.staged.{os.getpid()}"
        with conn.sftp_lock:
            conn.sftp().put(str(local), staged)
        recorded = Path(f"{local}.json").read_text().strip()
        place = (
            f"cd {shlex.quote(target)} && exec 9>>.{shlex.quote(name)}.lock && flock -w {LOCK_TIMEOUT_S} 9 && "
            f"if [ -s {shlex.quote(name)}.json ]; then rm -f -- {shlex.quote(staged)}; else "
            f"chmod a+r -- {shlex.quote(staged)} && mv -f -- {shlex.quote(staged)} {shlex.quote(name)} && "
            f"printf '%s\\n' {shlex.quote(recorded)} > {shlex.quote(name)}.json; fi"
        )
        ssh.run_remote(conn, place, safe_to_retry=True)
    shown = ssh.run_remote(conn, f"cat {record_file}", safe_to_retry=True)
    return _outputs_of(conversion_of(present.exit_code != 0, json.loads(shown.stdout)))


def _local_apptainer() -> str:
    from infra.toolchain.apptainer import apptainer_prefix
    from infra.toolchain.pins import load_pins

    built = apptainer_prefix(load_pins()) / "bin" / "apptainer"
    if built.is_file():
        return str(built)
    raise ApptainerError(
        "apptainer.source is here, but this machine has no Apptainer: run `scripts/bootstrap --with apptainer`"
    )


def _link(conn: ssh.PooledConnection, props: Mapping[str, Any], image: ImageReference) -> str:
    """Point the run directory's .atlas/image.sif at the SIF; its absolute path."""
    sif = f"{remote_path_expression(str(props['cache_dir']))}/{shlex.quote(image.sif_name)}"
    link_path = join_remote(str(props["run_dir"]), RUN_DIR_SIF)
    link, folder = remote_path_expression(link_path), remote_path_expression(link_path.rsplit("/", 1)[0])
    # A new link renamed over the old one: a job starting meanwhile sees one or the other.
    result = ssh.run_remote(
        conn,
        f"mkdir -p -- {folder} && ln -sfn -- {sif} {link}.new && mv -fT -- {link}.new {link} && readlink -f -- {link}",
        safe_to_retry=True,
    )
    return result.stdout.strip().splitlines()[-1]


def refuse_remote_plain_http(image: ImageReference, props: Mapping[str, Any]) -> None:
    """`plain_http` with a registry off loopback: refused before anything is pulled. The stack's
    parser checks what the config names; the OpenShift side's image is known only here."""
    if not props.get("plain_http"):
        return
    remote = remote_plain_http(image.registry, props.get("pull_registry") or None, str(props.get("source") or "site"),
                               props.get("image_arch") or None)
    if remote is not None:
        who, host = remote
        raise ApptainerError(
            f"{_where(props)}.apptainer.plain_http: true, but {who} would pull {image.pinned} from {host} over plain "
            f"HTTP, and {host} is not this machine's loopback (localhost, 127.0.0.0/8 or [::1]); nothing was pulled. "
            f"Fix: remove {_where(props)}.apptainer.plain_http (the registry speaks HTTPS), or pull from a registry "
            "on loopback"
        )


def make_sif(props: Mapping[str, Any]) -> dict[str, Any]:
    """What create and update do (module docstring); the outputs."""
    image = parse_image_reference(str(props["image"]), f"{_where(props)}.apptainer.image")
    refuse_remote_plain_http(image, props)
    conn = ssh.connection(endpoint_from(props))
    machine, version = _probe(conn, props)
    check_architecture(image, _image_architectures(image, props), machine, str(props["environment"]))
    conversion = (_convert_here if props.get("source") == "here" else _convert_on_site)(conn, image, props)
    return {
        **props,
        "digest": image.digest,
        "sif": _link(conn, props, image),
        "arch": oci_architecture(machine),
        "machine": machine,
        "apptainer_version": version,
        "conversion": conversion,
    }


class SifImageProvider(pulumi.dynamic.ResourceProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures: list[pulumi.dynamic.CheckFailure] = []
        check_ssh(news, failures)
        check_remote_dir(news.get("run_dir"), "run_dir", failures)
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = [] if same_login(olds, news) else ["ssh"]
        updates = changed(olds, news, (*IMAGE_INPUTS, "provider_version", "ssh_secret", "stack", "environment"))
        if not olds.get("sif"):
            updates.append("sif")  # refresh found the SIF or its link gone (pruned): make and link it again
        return pulumi.dynamic.DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        outs = make_sif(props)
        target = props["ssh"]
        return pulumi.dynamic.CreateResult(f"{target['user']}@{target['host']}:{outs['sif']}", outs)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(make_sif(news))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        # Refresh: a pruned SIF (or a removed link) makes the next `up` convert and link it again.
        conn = ssh.connection(endpoint_from(props))
        link = remote_path_expression(join_remote(str(props["run_dir"]), RUN_DIR_SIF))
        found = ssh.run_remote(conn, f"test -s {link} && readlink -f -- {link}", check=False, safe_to_retry=True)
        return pulumi.dynamic.ReadResult(id_, {**props, "sif": found.stdout.strip() if found.exit_code == 0 else ""})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        conn = ssh.connection(endpoint_from(props))
        link = remote_path_expression(join_remote(str(props["run_dir"]), RUN_DIR_SIF))
        ssh.run_remote(conn, f"rm -f -- {link}", safe_to_retry=True)


class SifImage(SshResource, module="hpc", name="SifImage"):
    image: pulumi.Output[str]  # the input, by digest: the stack's OpenShift image or the target's own
    digest: pulumi.Output[str]
    sif: pulumi.Output[str]
    arch: pulumi.Output[str]
    machine: pulumi.Output[str]
    apptainer_version: pulumi.Output[str]
    conversion: pulumi.Output[dict[str, Any]]

    def __init__(
        self,
        name: str,
        *,
        ssh_target: pulumi.Input[dict[str, Any]],
        ssh_secret: pulumi.Input[dict[str, Any]],
        environment: str,
        stack: str,
        run_dir: str,
        image: pulumi.Input[str],
        settings: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        inputs = {
            **over_ssh(ssh_target, ssh_secret),
            "environment": environment,
            "stack": stack,
            "run_dir": run_dir,
            "image": image,
            **{key: settings.get(key) for key in IMAGE_INPUTS if key not in ("image", "run_dir")},
        }
        super().__init__(SifImageProvider(), name, inputs, OUTPUTS, opts)
