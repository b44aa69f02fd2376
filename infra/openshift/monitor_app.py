"""A read-only JSON view of one run: its telemetry and its training log.

Runs in the monitor Deployment from a ConfigMap, with the results and logs PVCs mounted
read-only; standard library only, so any image with Python 3.11 serves it:

    python3 monitor_app.py --port 8080 --telemetry-dir /atlas/results/telemetry \
        --logs-dir /atlas/logs/logs --experiment biggan128-imagenet-bs128x4 --run <run id> \
        [--results-dir /atlas/results]

GET /                       what is served, and the run
GET /healthz                {"status": "ok"} (the probes)
GET /telemetry              the steps with telemetry files (name, bytes, modified)
GET /telemetry/<step>       the sampler's records (infra/telemetry/sampler.py), last ?tail=N
GET /log                    BigGAN's evaluation log (<experiment>_log.jsonl), last ?tail=N
GET /log/losses             G_loss, D_loss_real, D_loss_fake per iteration, last ?tail=N
GET /files/<area>/<path>    the files themselves, for `scripts/compare` (through the API server's
                            service proxy): area `telemetry` or `logs`, and `results` (the results
                            PVC, where a sweep's points write the file its metric is read from) when
                            given --results-dir; a folder answers with a JSON listing (name, bytes,
                            modified, directory), a file with its bytes
Anything but GET and HEAD is refused with 405: the monitor never changes the run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEFAULT_TAIL = 500
MAX_TAIL = 20000
# Step names are DNS labels (infra/validation.py DNS_LABEL, repeated here: this app imports only the
# standard library); anything else cannot name a file here.
STEP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LOSS_FILES = ("G_loss", "D_loss_real", "D_loss_fake")
# BigGAN-PyTorch writes "<itr>: <value>" per iteration ("1234: 1.234e+00").
LOSS_LINE = re.compile(r"^\s*(?P<itr>[0-9]+)\s*:\s*(?P<value>\S+)\s*$")
READ_CHUNK = 64 * 1024

NO_TRAINING_LOG = "the workload writes no training log Atlas reads (its definition names no logs.experiment)"


@dataclass(frozen=True)
class MonitorConfig:
    telemetry_dir: Path
    logs_dir: Path
    experiment: str | None  # None: the workload writes no training log the monitor reads
    run: str
    # The results PVC's root, served as area `results` (a sweep's points' folders), or None: not served.
    results_dir: Path | None = None


def tail_lines(path: Path, count: int) -> list[str]:
    """The last `count` complete lines of a file that may be growing, without reading it all.
    A last line without its newline is still being written and is left out."""
    if count <= 0:
        return []
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        end = handle.tell()
        data = b""
        position = end
        while position > 0 and data.count(b"\n") <= count:
            step = min(READ_CHUNK, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    if not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    lines = data.decode("utf-8", errors="replace").splitlines()
    if position > 0:
        lines = lines[1:]  # the first one may be cut
    return lines[-count:]


def parse_jsonl(lines: Iterable[str]) -> tuple[list[Any], int]:
    """Records, and how many lines were not JSON (reported, never guessed at)."""
    records: list[Any] = []
    unreadable = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            unreadable += 1
    return records, unreadable


def parse_loss_lines(lines: Iterable[str]) -> list[dict[str, float | int]]:
    points: list[dict[str, float | int]] = []
    for line in lines:
        match = LOSS_LINE.match(line)
        if match:
            try:
                points.append({"itr": int(match["itr"]), "value": float(match["value"])})
            except ValueError:
                continue
    return points


def _tail_parameter(query: dict[str, list[str]]) -> int:
    raw = query.get("tail", [str(DEFAULT_TAIL)])[0]
    if not raw.isdigit():
        raise ValueError(f"tail must be a whole number, got {raw!r}")
    return min(int(raw), MAX_TAIL)


def _file_info(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"bytes": stat.st_size, "modified": stat.st_mtime}


def respond(config: MonitorConfig, target: str) -> tuple[HTTPStatus, dict[str, Any]]:
    """The status and JSON body for a GET of `target` (path and query)."""
    parts = urlsplit(target)
    path = parts.path.rstrip("/") or "/"
    try:
        tail = _tail_parameter(parse_qs(parts.query))
    except ValueError as error:
        return HTTPStatus.BAD_REQUEST, {"error": str(error)}

    if path == "/healthz":
        return HTTPStatus.OK, {"status": "ok"}
    if path == "/":
        return HTTPStatus.OK, {
            "run": config.run,
            "experiment": config.experiment,
            "endpoints": [
                "/telemetry",
                "/telemetry/<step>?tail=N",
                "/log?tail=N",
                "/log/losses?tail=N",
                "/files/telemetry/<path>",
                "/files/logs/<path>",
                *(["/files/results/<path>"] if config.results_dir is not None else []),
                "/healthz",
            ],
        }
    if path == "/telemetry":
        files = sorted(config.telemetry_dir.glob("*.jsonl")) if config.telemetry_dir.is_dir() else []
        return HTTPStatus.OK, {"run": config.run, "steps": [{"step": f.stem, **_file_info(f)} for f in files]}
    if path.startswith("/telemetry/"):
        step = path.removeprefix("/telemetry/")
        if not STEP_NAME.match(step):
            return HTTPStatus.NOT_FOUND, {"error": f"no step {step!r}"}
        file = config.telemetry_dir / f"{step}.jsonl"
        if not file.is_file():
            return HTTPStatus.NOT_FOUND, {"error": f"no telemetry for step {step!r} yet"}
        records, unreadable = parse_jsonl(tail_lines(file, tail))
        return HTTPStatus.OK, {"run": config.run, "step": step, "records": records, "unreadable_lines": unreadable}
    if path in ("/log", "/log/losses") and config.experiment is None:
        return HTTPStatus.NOT_FOUND, {"error": NO_TRAINING_LOG}
    experiment = str(config.experiment)
    if path == "/log":
        file = config.logs_dir / f"{config.experiment}_log.jsonl"
        if not file.is_file():
            return HTTPStatus.NOT_FOUND, {"error": "no evaluation log yet (written every --test_every iterations)"}
        records, unreadable = parse_jsonl(tail_lines(file, tail))
        return HTTPStatus.OK, {
            "run": config.run,
            "experiment": config.experiment,
            "records": records,
            "unreadable_lines": unreadable,
        }
    if path == "/log/losses":
        losses: dict[str, Any] = {}
        for name in LOSS_FILES:
            file = config.logs_dir / experiment / f"{name}.log"
            losses[name] = parse_loss_lines(tail_lines(file, tail)) if file.is_file() else None
        return HTTPStatus.OK, {"run": config.run, "experiment": config.experiment, "losses": losses}
    return HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path!r}; see /"}


FILES_PREFIX = "/files/"


def resolve_file(config: MonitorConfig, target: str) -> Path | None:
    """The file or folder `/files/<area>/<path>` names, inside its area; None for anything else
    (an unknown area, `..`, a link leading out of the volume)."""
    path = urlsplit(target).path
    if not path.startswith(FILES_PREFIX):
        return None
    area, _, rest = path.removeprefix(FILES_PREFIX).partition("/")
    roots = {"telemetry": config.telemetry_dir, "logs": config.logs_dir}
    if config.results_dir is not None:
        roots["results"] = config.results_dir
    if area not in roots or ".." in rest.split("/"):
        return None
    root = roots[area].resolve()
    candidate = (root / rest).resolve()
    return candidate if candidate == root or candidate.is_relative_to(root) else None


def listing(folder: Path) -> dict[str, Any]:
    entries = []
    for entry in sorted(folder.iterdir()):
        stat = entry.stat()
        entries.append(
            {"name": entry.name, "bytes": stat.st_size, "modified": stat.st_mtime, "directory": entry.is_dir()}
        )
    return {"entries": entries}


def make_handler(config: MonitorConfig) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "atlas-monitor/1"

        def _send(self, status: HTTPStatus, body: dict[str, Any], include_body: bool = True) -> None:
            payload = json.dumps(body, allow_nan=False, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-store")
            if status == HTTPStatus.METHOD_NOT_ALLOWED:
                self.send_header("Allow", "GET, HEAD")
            self.end_headers()
            if include_body:
                self.wfile.write(payload)

        def _send_file(self, file: Path, include_body: bool) -> None:
            with file.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if include_body:
                    # Streamed, and no further than the size announced: the file may still be growing.
                    shutil.copyfileobj(_Limited(handle, size), self.wfile, 1 << 20)

        def _answer(self, include_body: bool) -> None:
            if self.path.startswith(FILES_PREFIX):
                found = resolve_file(config, self.path)
                try:
                    if found is not None and found.is_file():
                        self._send_file(found, include_body)
                    elif found is not None and found.is_dir():
                        self._send(HTTPStatus.OK, listing(found), include_body)
                    else:
                        self._send(HTTPStatus.NOT_FOUND, {"error": "no such file"}, include_body)
                except OSError as error:
                    self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(error).__name__}"}, include_body)
                return
            try:
                status, body = respond(config, self.path)
            except (OSError, ValueError) as error:  # a file vanishing or unreadable mid-read
                status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(error).__name__}: {error}"}
            self._send(status, body, include_body)

        def do_GET(self) -> None:
            self._answer(include_body=True)

        def do_HEAD(self) -> None:
            self._answer(include_body=False)

        def _refuse(self) -> None:
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "read-only: only GET and HEAD"})

        do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

        def log_message(self, format: str, *args: Any) -> None:
            # Probes every 10 s would drown the pod log.
            if "/healthz" not in self.path:
                super().log_message(format, *args)

    return Handler


class _Limited:
    """A reader that stops after `left` bytes."""

    def __init__(self, handle: Any, left: int) -> None:
        self.handle, self.left = handle, left

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        data = self.handle.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(data)
        return bytes(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--bind", default="0.0.0.0")  # noqa: S104 (serves the pod's Service)
    parser.add_argument("--telemetry-dir", type=Path, required=True)
    parser.add_argument("--logs-dir", type=Path, required=True)
    parser.add_argument("--experiment", help="the BigGAN-style training log's experiment (none: no /log)")
    parser.add_argument("--run", default="")
    parser.add_argument("--results-dir", type=Path, help="the results PVC's root, served as /files/results")
    options = parser.parse_args(argv)
    config = MonitorConfig(
        options.telemetry_dir, options.logs_dir, options.experiment, options.run, options.results_dir
    )
    server = ThreadingHTTPServer((options.bind, options.port), make_handler(config))
    print(f"atlas-monitor: serving {config} on {options.bind}:{options.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
