"""Benchmark: Pulumi's Python language plugin (Atlas's launcher) from start to serving.

The engine starts the language plugin twice per `pulumi up` (once to ask for plugins, once to
run the program), so its start-up is paid twice on every run. Each sample spawns the plugin the
way the engine does (the toolchain's `bin/pulumi-language-python`, the engine's address as its
last argument, from the repository root) and stops the clock when the plugin has printed its
port and answered a real gRPC call on it (GetPluginInfo): start to serving.

Two sides, ABBA order over --rounds rounds:
- launcher: the plugin as shipped (it registers bare `pulumi` packages and imports only the
  generated gRPC modules it serves);
- full-sdk: the same launcher after `import pulumi` (the whole SDK, what every Python program
  and the launcher before its trim paid).

The peer a user would otherwise run, upstream's Go `pulumi-language-python`, cannot be built here
(the Go module proxy refuses every version of its module), so it is not measured; the ratio
full-sdk/launcher says what the trim saves, not how Atlas compares with upstream.

    flock /tmp/atlas-heavy.lock .venv/bin/python -m bench.language_host_start [--rounds 12] [--out FILE]

Writes bench/results/language-host-start-<date>.json (or --out) with every sample.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import language_pb2_grpc

from bench.provenance import run_record, write_result
from bench.stats import RESULTS, abba_order, now_utc, paired_ratio
from infra.toolchain.pins import REPO_ROOT, load_pins, toolchain_dir

SIDES = ("launcher", "full-sdk")
FULL_SDK = "import pulumi, runpy, sys; runpy.run_module('infra.toolchain.language_host', run_name='__main__')"
ENGINE_ADDRESS = "127.0.0.1:1"  # never dialled before Run: start-up does not need the engine


@dataclass(frozen=True)
class Sample:
    side: str
    round: int
    port_printed_s: float
    serving_s: float
    plugin_version: str


def command(side: str, plugin: Path) -> list[str]:
    """The argv of one side (pure, tested): the plugin as the engine starts it, or the same
    launcher module under an interpreter that imported the whole SDK first."""
    if side == "launcher":
        return [str(plugin), ENGINE_ADDRESS]
    if side == "full-sdk":
        return [sys.executable, "-u", "-c", FULL_SDK, ENGINE_ADDRESS]
    raise ValueError(f"unknown side {side!r}")


def start_to_serving(side: str, number: int, plugin: Path) -> Sample:
    env = {**os.environ, "PULUMI_PYTHON_CMD": sys.executable, "PYTHONPATH": str(REPO_ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(command(side, plugin), cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        printed = time.perf_counter() - start
        if not line.isdigit():
            raise SystemExit(f"{side}: the plugin printed {line!r}, not a port (exit {proc.poll()})")
        with grpc.insecure_channel(f"127.0.0.1:{line}") as channel:
            info = language_pb2_grpc.LanguageRuntimeStub(channel).GetPluginInfo(empty_pb2.Empty(), timeout=30)
        serving = time.perf_counter() - start
    finally:
        # Outside the timing. SIGTERM, not SIGINT: the launcher's main thread waits on an Event, which
        # took the whole 10 s grace to notice SIGINT; SIGTERM's default action ends it at once.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return Sample(side, number, round(printed, 4), round(serving, 4), info.version)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.rounds < 10:
        parser.error("--rounds: at least 10 (the project's rule for a ratio with an interval)")
    plugin = toolchain_dir(load_pins()) / "bin" / "pulumi-language-python"
    if not plugin.exists():
        raise SystemExit(f"{plugin} is missing: run scripts/bootstrap first")
    started = now_utc()
    origin = run_record()
    for side in SIDES:  # warm-up: page cache; not counted
        start_to_serving(side, -1, plugin)
    samples: list[Sample] = []
    for number, order in enumerate(abba_order(SIDES, args.rounds)):
        for side in order:
            sample = start_to_serving(side, number, plugin)
            samples.append(sample)
            print(f"round {number + 1}/{args.rounds} {side:9} serving after {sample.serving_s:.3f} s", flush=True)
    by = {(s.side, s.round): s.serving_s for s in samples}
    result = {
        "bench": "language_host_start",
        "date": started,
        "finished": now_utc(),
        **origin,
        "provenance": "real: this machine, the toolchain's plugin spawned as the engine spawns it",
        "plugin": str(plugin),
        "rounds": args.rounds,
        "order": "ABBA over launcher, full-sdk, after one warm-up of each",
        "not_measured": {"upstream pulumi-language-python": "not measured: its Go module cannot be fetched here"},
        "median_s": {side: round(statistics.median(by[(side, k)] for k in range(args.rounds)), 4) for side in SIDES},
        "full_sdk_over_launcher": paired_ratio(
            [by[("full-sdk", k)] for k in range(args.rounds)], [by[("launcher", k)] for k in range(args.rounds)]
        ),
        "samples": [asdict(s) for s in samples],
    }
    ratio = result["full_sdk_over_launcher"]
    print(
        f"median: launcher {result['median_s']['launcher']:.3f} s, full-sdk {result['median_s']['full-sdk']:.3f} s; "
        f"full-sdk/launcher {ratio['median']:.2f} (95 % CI {ratio['ci95'][0]:.2f} to {ratio['ci95'][1]:.2f})"
    )
    out = args.out or RESULTS / f"language-host-start-{started[:10]}.json"
    out = write_result(result, out, indent=1)
    print(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
