"""The two scripts the OpenShift side mounts from ConfigMaps: monitor_app.py (the read-only
JSON monitor) and stage_data.py (data staging), run here against real files and a real
HTTP server on loopback."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra.openshift import monitor_app, stage_data
from infra.openshift.monitor_app import MonitorConfig, respond, tail_lines

# --- monitor_app


@pytest.fixture
def run_dirs(tmp_path: Path) -> MonitorConfig:
    telemetry = tmp_path / "results" / "telemetry"
    logs = tmp_path / "logs" / "logs"
    (logs / "exp").mkdir(parents=True)
    telemetry.mkdir(parents=True)
    records = [{"type": "sample", "t": float(i), "gpu": {"measured": False, "reason": "no NVML"}} for i in range(5)]
    # The last line is still being written: it must not be served half.
    (telemetry / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"type": "sam')
    (logs / "exp_log.jsonl").write_text('{"itr": 200, "IS_mean": 2.8, "FID": 173.7}\nnot json\n')
    (logs / "exp" / "G_loss.log").write_text("1: 1.234e+00\n2: 1.100e+00\n")
    return MonitorConfig(telemetry_dir=telemetry, logs_dir=logs, experiment="exp", run="run-7")


def test_telemetry_endpoints(run_dirs: MonitorConfig):
    status, body = respond(run_dirs, "/telemetry")
    assert status == HTTPStatus.OK
    assert [s["step"] for s in body["steps"]] == ["train"]
    status, body = respond(run_dirs, "/telemetry/train?tail=2")
    assert status == HTTPStatus.OK
    assert [r["t"] for r in body["records"]] == [3.0, 4.0]
    assert body["records"][0]["gpu"] == {"measured": False, "reason": "no NVML"}
    assert respond(run_dirs, "/telemetry/make-hdf5")[0] == HTTPStatus.NOT_FOUND
    assert respond(run_dirs, "/telemetry/..%2F..%2Fetc")[0] == HTTPStatus.NOT_FOUND
    assert respond(run_dirs, "/telemetry/train?tail=x")[0] == HTTPStatus.BAD_REQUEST


def test_log_endpoints(run_dirs: MonitorConfig):
    status, body = respond(run_dirs, "/log")
    assert status == HTTPStatus.OK
    assert body["records"] == [{"itr": 200, "IS_mean": 2.8, "FID": 173.7}]
    assert body["unreadable_lines"] == 1
    status, body = respond(run_dirs, "/log/losses")
    assert body["losses"]["G_loss"] == [{"itr": 1, "value": 1.234}, {"itr": 2, "value": 1.1}]
    assert body["losses"]["D_loss_real"] is None  # not written yet: not measured, not zero
    assert respond(run_dirs, "/")[1]["run"] == "run-7"


def test_tail_reads_only_complete_lines_of_a_large_file(tmp_path: Path):
    path = tmp_path / "big.jsonl"
    path.write_text("".join(f'{{"i": {i}}}\n' for i in range(50000)))
    assert tail_lines(path, 3) == ['{"i": 49997}', '{"i": 49998}', '{"i": 49999}']
    assert len(tail_lines(path, 20000)) == 20000
    assert tail_lines(path, 0) == []


@pytest.fixture
def monitor_server(run_dirs: MonitorConfig) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), monitor_app.make_handler(run_dirs))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_served_as_json_and_read_only(monitor_server: str):
    with urllib.request.urlopen(f"{monitor_server}/healthz", timeout=5) as response:  # noqa: S310
        assert response.headers["Content-Type"] == "application/json"
        assert json.load(response) == {"status": "ok"}
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        request = urllib.request.Request(f"{monitor_server}/telemetry/train", method=method, data=b"{}")  # noqa: S310
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)  # noqa: S310
        assert refused.value.code == HTTPStatus.METHOD_NOT_ALLOWED
        assert refused.value.headers["Allow"] == "GET, HEAD"


# --- stage_data


def test_copy_from_a_mounted_claim_is_idempotent(tmp_path: Path):
    source = tmp_path / "source" / "train"
    (source / "n01440764").mkdir(parents=True)
    (source / "n01440764" / "a.JPEG").write_bytes(b"jpeg")
    dest = tmp_path / "data" / "data" / "ImageNet" / "train"
    assert stage_data.main(["--source", str(source), "--dest", str(dest)]) == 0
    assert (dest / "n01440764" / "a.JPEG").read_bytes() == b"jpeg"
    assert stage_data.already_staged(dest, str(source))
    (source / "n01440764" / "b.JPEG").write_bytes(b"new")
    assert stage_data.stage(str(source), dest) == f"{dest} already holds {source}"
    assert not (dest / "n01440764" / "b.JPEG").exists()


def test_missing_source_fails_without_marker(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    dest = tmp_path / "dest"
    assert stage_data.main(["--source", str(tmp_path / "absent"), "--dest", str(dest)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not (dest / stage_data.MARKER).exists()


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_download_unpacks_archives_and_keeps_files(file_server: tuple[str, Path], tmp_path: Path):
    url, root = file_server
    (root / "train.tar.gz").write_bytes(_tar_gz({"n01/a.JPEG": b"a", "n02/b.JPEG": b"b"}))
    (root / "inception.pth").write_bytes(b"weights")
    dest = tmp_path / "train"
    assert stage_data.main(["--source", f"{url}/train.tar.gz", "--dest", str(dest)]) == 0
    assert (dest / "n02" / "b.JPEG").read_bytes() == b"b"
    assert not list(dest.glob(".train.tar.gz*"))  # the archive is gone once unpacked
    weights = tmp_path / "checkpoints"
    assert stage_data.main(["--source", f"{url}/inception.pth", "--dest", str(weights)]) == 0
    assert (weights / "inception.pth").read_bytes() == b"weights"


def test_an_archive_that_escapes_is_refused(file_server: tuple[str, Path], tmp_path: Path):
    url, root = file_server
    (root / "evil.tar.gz").write_bytes(_tar_gz({"../../outside": b"x"}))
    assert stage_data.main(["--source", f"{url}/evil.tar.gz", "--dest", str(tmp_path / "d")]) == 1
    assert not (tmp_path / "outside").exists()
