"""Stand-up: `pulumi up` of the `local` stack against the script a competent user writes instead.

Both sides stand up the same run on the same local environment (the OpenShift side on the real
local node: kubelet, containerd and runc, mock GPUs, the image built by the BuildConfig runner
stand-in into the local registry; Satori through the LSF command set (stand-in) over a real Slurm,
reached over real OpenSSH), one after the other, ABBA order (each round the reverse of the one
before), `--rounds` rounds. Each timing starts with nothing of the run in place and ends when
the preparation steps have succeeded on both sides and the training step is submitted:

- atlas: `pulumi up --yes --skip-preview -s local` (`satori-slurm` disabled: the script drives
  LSF only). Inside the timing: the CLI, language host, program, plugins and diff; on the
  OpenShift side the namespace, quota, limits, service account, claims, ConfigMaps, ImageStream
  and BuildConfig (the runner builds from Git with buildah, layers cached, and pushes), the wait
  for the ImageStream's tag, the volume-preparation Job, the monitor (Deployment and Service,
  awaited until available), and the step Jobs, each awaited one until its pod Succeeded; on
  Satori one SSH login (paramiko), SFTP staging checked by sha256, one `bsub` per step chained by
  `-w "done(id)"`, and `bjobs` every 2 s until the preparation steps are DONE.
- script: what a person writes without Atlas, given Atlas's own objects and job scripts (taken
  from an untimed warm-up `pulumi up`; status, uids, resourceVersions, controller labels and
  selectors stripped, moved to the script's namespace). Its Kubernetes and HPC halves run
  concurrently, as Atlas's do:
  - Kubernetes: one `kubectl apply` of every object that is not a Job or the Deployment (in
    Atlas's creation order); `kubectl wait` on the ImageStream for the same jsonpath Atlas awaits
    (so the script builds its image the same way, through the same BuildConfig runner and the
    same layer cache, and uses the digest its own build pushed: it is not handed Atlas's image);
    then each staging Job applied and, where Atlas awaits it, followed with
    `kubectl get pods -l job-name=<job> -w` until its pod's phase is Succeeded (what Atlas's
    JobCompletion waits for; not `kubectl wait --for=condition=complete`, which the job
    controller answers about a second later); then the monitor's Deployment applied and
    `kubectl rollout status` in the background; then the step Jobs likewise; then the rollout.
  - HPC: one OpenSSH ControlMaster connection (ControlPersist) for every `ssh` and `scp` call of
    the run: `ssh mkdir -p`, one `scp -r` of the job scripts and the staged Python, one
    `ssh 'cd dir && bsub [-w "done(id)"] < script'` per step, then `ssh bjobs` every 2 s (Atlas's
    poll interval on this stack) until the preparation steps are DONE. The master's login is
    inside the timing; closing it (`ssh -O exit`) is not. Job scripts are Atlas's, with the run
    folder and job names changed, written to disk before the timing starts.

SSH logins are counted by the server (the "Accepted publickey" lines in the local sshd's log
during each timing), as bench/hpc_sweep.py does. Cleanup after every timing, outside it:
`pulumi destroy`, or `kubectl delete namespace`, `bkill` and `rm -rf` of the remote folder; the
released volumes are handed back to the pool before the next side starts. The JSON holds every
sample and the paired ratio script/atlas per round with a 95 % bootstrap interval (above 1:
Atlas stood the run up faster). The warm-up also times no-change `pulumi up`s, Atlas's fixed
cost per invocation: three while its train steps still run on this machine's cores (a pod and an
LSF job), then three once they have ended (on a real site the steps run on other machines).

Runs against the running local environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE
(`scripts/localenv up` first: the Kubernetes side, the node and Satori), with its own Pulumi home
and backend and its own namespaces and remote folders; heavy, so under the shared lock:

    flock /tmp/atlas-heavy.lock .venv/bin/python -m bench.local_vs_script [--rounds 10] [--until HH:MM]
        [--out FILE]

Writes bench/results/local-vs-script-<date>.json (or --out); with --until (UTC), no round starts that
would end after that time by the last round's length, and the JSON says how many ran of how many.

Here: the rounds and the result. The environment and the Atlas side: local_vs_script_env.py; the
script side: local_vs_script_peer.py.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.local_vs_script_env import (
    STACK,
    Env,
    atlas_clean,
    atlas_up,
    capture,
    capture_hpc_tree,
    configure,
    remove_leftovers,
    say,
    steps_ended,
)
from bench.local_vs_script_peer import Script
from bench.provenance import run_record, write_result
from bench.stats import RESULTS, abba_order, now_utc, paired_ratio
from localenv import kube, satori
from localenv.layout import Layout, default_layout
from tests.e2e.pulumi_cli import PulumiProject

SIDES = ("atlas", "script")


def build_cache(log_text: str) -> dict[str, int]:
    """How many of a buildah build's steps came from the layer cache, from its log: a commit to the
    build context between rounds (this working tree is shared) rebuilds the layers after it."""
    lines = log_text.splitlines()
    return {
        "steps": sum(1 for line in lines if re.match(r"STEP \d+/\d+:", line)),
        "cached": sum(1 for line in lines if line.startswith("--> Using cache ")),
    }


def summarise(samples: Sequence[Mapping[str, Any]], rounds: int) -> dict[str, Any]:
    seconds = {side: [float(s["seconds"]) for s in samples if s["side"] == side] for side in SIDES}
    logins = {side: sorted({int(s["logins"]) for s in samples if s["side"] == side}) for side in SIDES}
    return {
        "rounds": rounds,
        "order": "ABBA (each round the reverse of the one before)",
        "median_s": {side: round(statistics.median(v), 2) for side, v in seconds.items()},
        "logins_per_run": logins,
        # Above 1: Atlas stood the run up in less time than the script.
        "script_over_atlas": paired_ratio(seconds["script"], seconds["atlas"]),
        "samples": list(samples),
    }


# --- main ------------------------------------------------------------------------------------------


def check_environment(layout: Layout) -> str | None:
    """Why the environment cannot carry the bench, or None."""
    if not kube.status(layout)["ready"]:
        return "the local Kubernetes side is not running"
    if not satori.status(layout)["ssh"].get("running", False):
        return "the local Satori is not running"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, help="default: bench/results/local-vs-script-<date>.json")
    parser.add_argument(
        "--until",
        type=until_time,
        help="UTC time (HH:MM, today): start no round that the last one's length says would end after it",
    )
    args = parser.parse_args()
    layout = default_layout()
    problem = check_environment(layout)
    if problem:
        print(
            f"bench: {problem} in {layout.state_dir}: start it with `scripts/localenv up` "
            "(same ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE)",
            file=sys.stderr,
        )
        return 1
    say(f"local environment {layout.state_dir}, ports {layout.ports.base}+; {args.rounds} rounds")
    date = now_utc()
    origin = run_record()
    # Short: ControlPath sockets must fit in 108 bytes.
    with tempfile.TemporaryDirectory(prefix="avs-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        result = bench(layout, tmp, args.rounds, args.until)
    result = {
        "bench": "local_vs_script",
        "date": date,
        **origin,
        "provenance": "local environment: OpenShift side on the real local node (kubelet, containerd, runc; mock "
        "GPUs; image built by the BuildConfig runner stand-in into the local registry); Satori: LSF's command "
        "set (stand-in) over a real Slurm, over real OpenSSH; the probe workload",
        "what": "stand-up: `pulumi up -s local` (OpenShift side + Satori LSF, preparation steps awaited) vs a "
        "script of kubectl apply/wait/watch + ssh/scp/bsub/bjobs over one ControlMaster connection",
        **result,
    }
    med = result["median_s"]
    ratio = result["script_over_atlas"]
    low, high = ratio["ci95"]
    verdict = "Atlas faster" if low > 1 else "Atlas slower" if high < 1 else "no clear winner"
    say(
        f"medians: atlas {med['atlas']:.2f} s, script {med['script']:.2f} s; script/atlas {ratio['median']:.3f} "
        f"(95 % CI {low:.3f} to {high:.3f}, {ratio['rounds']} rounds): {verdict}"
    )
    out = args.out or RESULTS / f"local-vs-script-{date[:10]}.json"
    out = write_result(result, out)
    say(f"wrote {out}")
    return 0


def until_time(text: str) -> dt.datetime:
    """`--until HH:MM`, today in UTC."""
    hour, _, minute = text.partition(":")
    return dt.datetime.now(dt.UTC).replace(hour=int(hour), minute=int(minute or 0), second=0, microsecond=0)


def bench(layout: Layout, tmp: Path, rounds: int, until: dt.datetime | None = None) -> dict[str, Any]:
    proj = PulumiProject.create(tmp / "pulumi")
    env = Env(layout, proj)
    remove_leftovers(env)
    try:
        return _bench(env, tmp, rounds, until)
    except BaseException:
        with contextlib.suppress(Exception):
            proj.run("destroy", "--yes", "-s", STACK, check=False)
            remove_leftovers(env)
        raise


def _bench(env: Env, tmp: Path, rounds: int, until: dt.datetime | None) -> dict[str, Any]:
    proj = env.proj
    started = time.perf_counter()

    def progress(text: str) -> None:
        elapsed = int(time.perf_counter() - started)
        say(f"[{elapsed // 60:02d}m{elapsed % 60:02d}s] {text}")

    warm_ns, warm_remote = configure(env, "warmup")
    proj.run("stack", "init", STACK)
    progress("warm-up pulumi up (untimed): the objects and job scripts the script is given")
    warm = atlas_up(env)
    objects, awaited = capture(env, warm_ns)
    capture_hpc_tree(env, warm_remote, tmp / "tree")
    script = Script(env, objects, awaited, tmp / "tree", warm_ns, warm_remote)
    kinds = sorted({o["kind"] for _, o in objects})
    progress(
        f"warm-up {warm:.1f} s; {len(objects)} Kubernetes objects ({', '.join(kinds)}), {len(awaited)} "
        f"awaited Jobs, {len(script.templates)} job scripts; Atlas's image {script.atlas_image}"
    )
    # This machine runs the workload too: right after the warm-up its train steps (one pod, one
    # LSF job) hold the cores Pulumi needs. Timed both ways; on a real site they run elsewhere.
    noop_during_steps = [atlas_up(env) for _ in range(3)]
    progress(f"no-change pulumi up, the warm-up's steps running: {', '.join(f'{t:.2f} s' for t in noop_during_steps)}")
    progress("waiting for the warm-up's steps to end (its Jobs complete, no unfinished LSF job)")
    steps_ended(env, warm_ns)
    noop = [atlas_up(env) for _ in range(3)]
    progress(f"no-change pulumi up, nothing else running: {', '.join(f'{t:.2f} s' for t in noop)}")
    atlas_clean(env, warm_ns, warm_remote)

    samples: list[dict[str, Any]] = []
    control_dir = tmp / "cm"
    control_dir.mkdir()
    sides: dict[str, Callable[[str], dict[str, Any]]] = {}

    def image_builds(ns: str, since: float) -> list[dict[str, int]]:
        """The BuildConfig runner's logs of this side's builds (kept in the state folder)."""
        folder = env.layout.state_dir / "builds" / ns
        logs = sorted(p for p in folder.glob("*.log") if p.stat().st_mtime >= since) if folder.is_dir() else []
        return [build_cache(p.read_text(errors="replace")) for p in logs]

    def atlas_side(tag: str) -> dict[str, Any]:
        ns, remote = configure(env, tag)
        since = time.time()
        elapsed = atlas_up(env)
        return {
            "seconds": elapsed,
            "image_builds": image_builds(ns, since),
            "_clean": lambda: atlas_clean(env, ns, remote),
        }

    def script_side(tag: str) -> dict[str, Any]:
        since = time.time()
        done = script.up(tag, tmp / "scratch", control_dir)
        return {
            "seconds": done.seconds,
            "kube_s": round(done.kube_s, 3),
            "hpc_s": round(done.hpc_s, 3),
            "image_builds": image_builds(done.ns, since),
            "_clean": lambda: script.clean(done),
        }

    sides = {"atlas": atlas_side, "script": script_side}
    done = 0
    last_round_s = 0.0
    stopped = None
    for index, order in enumerate(abba_order(SIDES, rounds)):
        round_started = time.perf_counter()
        if until is not None and index and dt.datetime.now(dt.UTC) + dt.timedelta(seconds=last_round_s) > until:
            stopped = f"stopped after {index} of {rounds} rounds: another would end after {until.isoformat()}"
            progress(stopped)
            break
        for side in order:
            progress(f"round {index + 1}/{rounds} {side}: starting")
            before = env.logins()
            sample = sides[side](f"{side[0]}{index}")
            logins = env.logins() - before
            clean = sample.pop("_clean")
            clean()
            sample = {"round": index, "side": side, **sample, "seconds": round(sample["seconds"], 3), "logins": logins}
            samples.append(sample)
            extra = (
                f" (kube half {sample['kube_s']:.2f} s, HPC half {sample['hpc_s']:.2f} s)" if side == "script" else ""
            )
            progress(f"round {index + 1}/{rounds} {side}: {sample['seconds']:.2f} s, {logins} login(s){extra}")
        last_round_s = time.perf_counter() - round_started
        done = index + 1
    proj.run("stack", "rm", "--yes", "--preserve-config", "-s", STACK)
    return {
        **summarise(samples, done),
        "rounds_planned": rounds,
        **({"stopped_early": stopped} if stopped else {}),
        "atlas_warmup_up_s": round(warm, 3),
        "atlas_noop_up_s": [round(t, 3) for t in noop],
        "atlas_noop_up_median_s": round(statistics.median(noop), 3),
        "atlas_noop_up_during_steps_s": [round(t, 3) for t in noop_during_steps],
        "kubernetes_objects": sorted(f"{o['kind']}/{o['metadata']['name']}" for _, o in objects),
        "awaited_jobs": sorted(awaited),
        "hpc_scheduler": "lsf (command-set stand-in over Slurm)",
    }


if __name__ == "__main__":
    raise SystemExit(main())
