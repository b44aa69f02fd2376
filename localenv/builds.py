"""A stand-in for OpenShift's build controller, for Docker-strategy BuildConfigs from Git.

OpenShift's build controller (openshift-controller-manager) and its internal registry cannot
run on the local cluster, so this runner does what they do for the BuildConfigs Atlas creates,
following OpenShift's documented behaviour (Builds and BuildConfigs, build.openshift.io/v1):

- a BuildConfig with a ConfigChange trigger is built once when it is created: the runner makes
  Build `<config>-<n>` (labels and annotations `openshift.io/build-config.name`,
  `openshift.io/build.number`, an owner reference, the config's spec, `triggeredBy`) and sets
  the config's `status.lastVersion`; `runPolicy: Serial` builds one at a time per config;
- the Build moves through New, Pending, Running and Complete, Failed, Error or Cancelled, with
  start and completion times, `duration`, the commit it built (`spec.revision`), and
  `output.to.imageDigest` on success; a build that did not complete gets OpenShift's `reason`
  and `message` (FetchSourceFailed, InvalidContextDirectory, DockerBuildFailed,
  PushImageToRegistryFailed: Failed, with the log's last 5 lines as `logSnippet`, as
  openshift-controller-manager keeps them; CancelledBuild: Cancelled, for `status.cancelled`
  set before the build or between its fetch and its build; BuildPodDeleted: Error, for a build
  a runner that stopped left Pending or Running, found when the next one starts);
- the source is fetched with git from the config's URI and ref, the image built with buildah
  from the context folder and Dockerfile path with the build args (localenv/images.py),
  and pushed to the local registry, which stands in for the internal one;
- the output ImageStreamTag is updated the way the registry's image-stream mapping does it: the
  ImageStream's `status.dockerImageRepository` and a tag event (`dockerImageReference` by
  digest, `image`, `created`, `generation`) on top of the tag's history.

The build log is kept in the environment's state folder (`builds/<namespace>/<build>.log`), named
by the Build's `atlas.dev/build-log` annotation (a CRD cannot serve OpenShift's `builds/log`).

    python -m localenv.builds <state dir> <api port> <registry host>
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.kubeapi import KubeApi, KubeRequestError
from infra.validation import mask_url_credentials
from localenv.build_objects import (
    BUILD_API,
    BUILD_CONFIG_LABEL,
    IMAGE_API,
    LOG_ANNOTATION,
    Manifest,
    Output,
    ended_status,
    image_stream_status,
    is_cancelled,
    new_build,
    now_text,
    wants_config_change_build,
)

POLL_S = 1.0


class BuildFailed(Exception):
    """A build that did not complete: `reason` as OpenShift gives it (build_objects.STATUS_MESSAGES),
    `detail` what went wrong here, written as the log's last line."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _run(argv: Sequence[str], log: Path, cwd: Path | None = None) -> str:
    with log.open("a") as out:
        out.write(f"$ {mask_url_credentials(' '.join(argv))}\n")
        out.flush()
        proc = subprocess.run(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
        out.write(proc.stdout)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout)
    return proc.stdout


class Runner:
    def __init__(self, api: KubeApi, state_dir: Path, registry: str, log: logging.Logger) -> None:
        self.api = api
        self.state_dir = state_dir
        self.registry = registry
        self.log = log

    # --- the controller's loop

    def recover(self) -> int:
        """End the builds a runner that stopped left Pending or Running (this one runs one build at
        a time, in its own process: none of them can still be going) as OpenShift ends a build
        whose pod was deleted: Error, BuildPodDeleted. Returns how many."""
        ended = 0
        for build in self.api.get(f"{BUILD_API}/builds")["items"]:
            if (build.get("status") or {}).get("phase") in ("Pending", "Running"):
                self._set_status(build, ended_status("BuildPodDeleted", "", None, dt.datetime.now(dt.UTC)))
                self.log.warning("build %s/%s was left %s by a runner that stopped: ended Error",
                                 build["metadata"]["namespace"], build["metadata"]["name"], build["status"]["phase"])
                ended += 1
        return ended

    def round(self) -> int:
        """Trigger what the configs ask for, then run the oldest new build; returns builds run."""
        configs = self.api.get(f"{BUILD_API}/buildconfigs")["items"]
        for config in configs:
            if wants_config_change_build(config):
                self.instantiate(config)
        builds = self.api.get(f"{BUILD_API}/builds")["items"]
        waiting = sorted((b for b in builds if (b.get("status") or {}).get("phase", "New") == "New"),
                         key=lambda b: b["metadata"]["creationTimestamp"])
        running = {(b["metadata"]["namespace"], b["metadata"]["labels"].get(BUILD_CONFIG_LABEL)) for b in builds
                   if (b.get("status") or {}).get("phase") in ("Pending", "Running")}
        for build in waiting:
            key = (build["metadata"]["namespace"], build["metadata"]["labels"].get(BUILD_CONFIG_LABEL))
            if key in running:  # runPolicy Serial: one at a time per config
                continue
            self.run_build(build)
            return 1
        return 0

    def instantiate(self, config: Mapping[str, Any]) -> None:
        meta = config["metadata"]
        number = int((config.get("status") or {}).get("lastVersion") or 0) + 1
        build = new_build(config, number)
        base = f"{BUILD_API}/namespaces/{meta['namespace']}"
        try:
            created = self.api.request("POST", f"{base}/builds", build)
        except KubeRequestError as err:
            if err.status != 409:
                raise
            created = self.api.get(f"{base}/builds/{build['metadata']['name']}")
        self._set_status(created, {"phase": "New"})
        self.api.request("PATCH", f"{base}/buildconfigs/{meta['name']}/status",
                         {"status": {"lastVersion": number}}, "application/merge-patch+json")
        self.log.info("build %s/%s created from its BuildConfig", meta["namespace"], build["metadata"]["name"])

    def _set_status(self, build: Mapping[str, Any], status: Mapping[str, Any]) -> Manifest:
        meta = build["metadata"]
        path = f"{BUILD_API}/namespaces/{meta['namespace']}/builds/{meta['name']}/status"
        result: Manifest = self.api.request("PATCH", path, {"status": status}, "application/merge-patch+json")
        return result

    def run_build(self, build: Manifest) -> None:
        meta = build["metadata"]
        if is_cancelled(build):  # cancelled while it waited
            self._set_status(build, ended_status("CancelledBuild", "", None, dt.datetime.now(dt.UTC)))
            self.log.info("build %s/%s cancelled before it ran", meta["namespace"], meta["name"])
            return
        log_path = self.state_dir / "builds" / meta["namespace"] / f"{meta['name']}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("")
        self.api.request("PATCH", f"{BUILD_API}/namespaces/{meta['namespace']}/builds/{meta['name']}",
                         {"metadata": {"annotations": {LOG_ANNOTATION: str(log_path)}}},
                         "application/merge-patch+json")
        output = Output.of(build)
        started = dt.datetime.now(dt.UTC)
        self._set_status(build, {"phase": "Pending",
                                 "outputDockerImageReference": f"{self.registry}/{output.repository}:{output.tag}"})
        self._set_status(build, {"phase": "Running", "startTimestamp": now_text(started)})
        self.log.info("build %s/%s running", meta["namespace"], meta["name"])
        try:
            commit, digest = self.execute(build, output, log_path)
        except BuildFailed as failed:
            with log_path.open("a") as out:
                out.write(f"error: {failed.detail}\n")
            status = ended_status(failed.reason, log_path.read_text(errors="replace"), started, dt.datetime.now(dt.UTC))
            self._set_status(build, status)
            self.log.warning("build %s/%s ended %s (%s): %s", meta["namespace"], meta["name"], status["phase"],
                             failed.reason, failed.detail)
            return
        finished = dt.datetime.now(dt.UTC)
        if output.stream is not None:
            self.tag_image(meta["namespace"], output, digest, now_text(finished))
        self.api.request("PATCH", f"{BUILD_API}/namespaces/{meta['namespace']}/builds/{meta['name']}",
                         {"spec": {"revision": {"type": "Git", "git": {"commit": commit}}}},
                         "application/merge-patch+json")
        self._set_status(build, {
            "phase": "Complete", "completionTimestamp": now_text(finished),
            "duration": int((finished - started).total_seconds() * 1e9),
            "output": {"to": {"imageDigest": digest}},
        })
        self.log.info("build %s/%s complete: %s", meta["namespace"], meta["name"], digest)

    def _cancelled_since(self, build: Mapping[str, Any]) -> bool:
        meta = build["metadata"]
        current = self.api.get(f"{BUILD_API}/namespaces/{meta['namespace']}/builds/{meta['name']}")
        return is_cancelled(current)

    def execute(self, build: Mapping[str, Any], output: Output, log: Path) -> tuple[str, str]:
        """Fetch the source, build, push; returns (commit, digest) or raises BuildFailed."""
        from localenv import images  # buildah and the registry

        spec = build["spec"]
        source = spec.get("source") or {}
        if source.get("type") != "Git" or "git" not in source:
            raise BuildFailed("GenericBuildFailed", f"source type {source.get('type')!r}: the local build runner "
                              "builds only Git sources (the BuildConfigs Atlas creates)")
        strategy = spec.get("strategy") or {}
        if strategy.get("type") != "Docker":
            raise BuildFailed("GenericBuildFailed", f"strategy {strategy.get('type')!r}: the local build runner "
                              "builds only the Docker strategy")
        docker = strategy.get("dockerStrategy") or {}
        with tempfile.TemporaryDirectory(prefix="atlas-build-") as tmp:
            checkout = Path(tmp) / "source"
            ref = source["git"].get("ref") or "HEAD"
            try:
                _run(["git", "init", "-q", str(checkout)], log)
                _run(["git", "-C", str(checkout), "fetch", "-q", "--depth", "1", source["git"]["uri"], ref], log)
                _run(["git", "-C", str(checkout), "checkout", "-q", "FETCH_HEAD"], log)
                commit = _run(["git", "-C", str(checkout), "rev-parse", "HEAD"], log).strip()
            except subprocess.CalledProcessError as err:
                raise BuildFailed("FetchSourceFailed", f"git could not fetch the source at {ref} "
                                  f"(exit {err.returncode})") from None
            context = checkout / source.get("contextDir", "")
            if not context.is_dir():
                raise BuildFailed("InvalidContextDirectory",
                                  f"contextDir {source.get('contextDir')!r} is not a folder of the source at {commit}")
            if self._cancelled_since(build):
                raise BuildFailed("CancelledBuild", "cancelled after the source was fetched")
            dockerfile = context / docker.get("dockerfilePath", "Dockerfile")
            args = {a["name"]: a.get("value", "") for a in docker.get("buildArgs") or []}
            try:
                built = images.build_image_from(context, dockerfile, output.repository, output.tag, args, log,
                                                self.registry)
            except images.ImageBuildFailed as err:
                raise BuildFailed(err.reason, str(err)) from None
        return commit, built.digest

    def tag_image(self, namespace: str, output: Output, digest: str, created: str) -> None:
        path = f"{IMAGE_API}/namespaces/{namespace}/imagestreams/{output.stream}"
        for _ in range(5):  # a conflicting writer (the provider's apply) makes us read again
            stream = self.api.get(path)
            status = image_stream_status(stream, self.registry, output.tag, digest, created)
            try:
                self.api.request("PUT", f"{path}/status", {**stream, "status": status})
                return
            except KubeRequestError as err:
                if err.status != 409:
                    raise
        raise RuntimeError(f"could not update {path}/status after 5 conflicts")


def serve(runner: Runner, stop: threading.Event) -> None:
    recovered = False
    while not stop.is_set():
        try:
            if not recovered:  # once, before the first build: the API server may still be starting
                runner.recover()
                recovered = True
            ran = runner.round()
        except (OSError, KubeRequestError) as err:
            runner.log.warning("round failed (%s); retrying", err)
            ran = 0
        if not ran:
            stop.wait(POLL_S)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localenv.builds", description=__doc__.splitlines()[0])
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("kubeconfig", type=Path)
    parser.add_argument("registry", help="host:port of the local registry")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s build-runner %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if shutil.which("git") is None or shutil.which("buildah") is None:
        print("build-runner: git and buildah are needed (scripts/localenv up installs buildah)", file=sys.stderr)
        return 2
    runner = Runner(KubeApi(args.kubeconfig, timeout_s=30), args.state_dir, args.registry,
                    logging.getLogger("build-runner"))
    runner.log.info("stand-in for OpenShift's build controller: Docker strategy, Git source, registry %s",
                    args.registry)
    started = time.monotonic()
    serve(runner, stop)
    runner.log.info("stopped after %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
