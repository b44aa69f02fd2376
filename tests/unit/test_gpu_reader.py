"""The NVML reader: utilization as the mean of NVML's sample buffer, only the job's GPUs.

NVML itself needs a GPU, so these tests drive NvmlReader through an object with the
nvidia-ml-py calls it uses, behaving as the library documents: nvmlDeviceGetSamples returns
the samples newer than the timestamp given and raises NVMLError_NotFound when there are none.
bench/gpu_check.py checks the same reader against CUDA-event-timed loads on a real GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from infra.telemetry import gpu
from infra.telemetry.gpu import NvmlReader, mean_since, select_visible

UUIDS = ["GPU-aaaa1111", "GPU-bbbb2222", "GPU-cccc3333", "GPU-dddd4444"]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("2", [2]),
        ("1,3", [1, 3]),
        ("3,0", [3, 0]),
        ("GPU-cccc3333", [2]),
        ("GPU-bbbb", [1]),  # a unique prefix, as CUDA accepts
        ("GPU-", []),  # ambiguous: CUDA stops there
        ("0,7,1", [0]),  # CUDA stops at the first entry it cannot use
        ("1,1", [1]),
        (" 0 , 2 ", [0, 2]),
    ],
)
def test_select_visible_follows_cuda_visible_devices(visible: str | None, expected: list[int]) -> None:
    assert select_visible(visible, UUIDS) == expected


@pytest.mark.parametrize(
    ("samples", "since", "expected"),
    [
        ([], 100, (None, 0, 100)),
        ([(50, 100.0), (90, 100.0)], 100, (None, 0, 100)),  # all older than the last reading
        ([(50, 100.0), (150, 30.0), (250, 60.0)], 100, (45.0, 2, 250)),
        ([(300, 0.0), (200, 100.0)], 100, (50.0, 2, 300)),  # the buffer's order does not matter
        ([(101, 0.0)], 100, (0.0, 1, 101)),  # an idle GPU is a measured 0
    ],
)
def test_mean_since_averages_only_new_samples(
    samples: list[tuple[int, float]], since: int, expected: tuple[float | None, int, int]
) -> None:
    assert mean_since(samples, since) == expected


class FakeNvmlError(Exception):
    pass


class FakeNotFound(FakeNvmlError):
    pass


class FakeNotSupported(FakeNvmlError):
    pass


@dataclass
class FakeNvml:
    """The nvidia-ml-py calls NvmlReader makes, over a scripted buffer per GPU."""

    buffers: dict[int, list[tuple[int, int]]]
    instant: dict[int, int]
    supported: bool = True
    calls: list[tuple[int, int]] = field(default_factory=list)
    NVMLError = FakeNvmlError
    NVMLError_NotFound = FakeNotFound
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def nvmlDeviceGetCount(self) -> int:
        return len(UUIDS)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return UUIDS[handle].encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: Any = None) -> Any:
        return SimpleNamespace(used=1 << 30, total=141 << 30)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=self.instant[handle])

    def nvmlDeviceGetSamples(self, handle: int, kind: int, since: int) -> tuple[int, list[Any]]:
        self.calls.append((handle, since))
        if not self.supported:
            raise FakeNotSupported("Not Supported")
        fresh = [
            SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v))
            for t, v in self.buffers[handle]
            if t > since
        ]
        if not fresh:
            raise FakeNotFound("Not Found")
        return 0, fresh


def test_reader_averages_the_buffer_since_its_last_reading() -> None:
    nvml = FakeNvml(buffers={1: [(900, 100), (1100, 0), (1200, 100), (1300, 50)]}, instant={1: 7})
    reader = NvmlReader(nvml, visible="1", clock_us=lambda: 1000)
    first = reader.read()
    (device,) = first["devices"]
    assert device["index"] == 1
    assert (device["utilization_percent"], device["utilization_method"], device["utilization_samples"]) == (
        50.0,
        "nvml-samples",
        3,
    )
    # The next reading asks only for what came after the newest sample it used.
    nvml.buffers[1].append((1400, 20))
    assert reader.read()["devices"][0]["utilization_percent"] == 20.0
    assert [since for _, since in nvml.calls] == [1000, 1300]


def test_no_new_sample_falls_back_to_the_instant_reading_and_says_so() -> None:
    nvml = FakeNvml(buffers={0: [(500, 100)]}, instant={0: 42})
    (device,) = NvmlReader(nvml, visible="0", clock_us=lambda: 1000).read()["devices"]
    assert (device["utilization_percent"], device["utilization_method"]) == (42.0, "nvml-instant")


def test_a_gpu_without_the_buffer_is_read_instantly_from_then_on() -> None:
    nvml = FakeNvml(buffers={0: [], 1: []}, instant={0: 10, 1: 90}, supported=False)
    reader = NvmlReader(nvml, visible="0,1", clock_us=lambda: 0)
    reader.read()
    second = reader.read()
    assert [d["utilization_method"] for d in second["devices"]] == ["nvml-instant", "nvml-instant"]
    assert len(nvml.calls) == 2  # asked once per GPU, then not again


def test_only_the_jobs_gpus_are_read() -> None:
    nvml = FakeNvml(buffers={i: [] for i in range(4)}, instant={0: 1, 1: 2, 2: 3, 3: 4})
    devices = NvmlReader(nvml, visible="GPU-dddd4444,GPU-bbbb2222", clock_us=lambda: 0).read()["devices"]
    assert [(d["index"], d["utilization_percent"]) for d in devices] == [(3, 4.0), (1, 2.0)]


def test_a_job_with_no_gpu_is_not_measured_never_zero() -> None:
    reading = NvmlReader(FakeNvml(buffers={}, instant={}), visible="", clock_us=lambda: 0).read()
    assert reading["measured"] is False
    assert "no GPU" in reading["reason"]


@pytest.mark.parametrize("prefer", ["auto", "nvml", "nvidia-smi"])
def test_a_step_given_mock_gpus_reads_none_of_the_host_s(prefer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Told by what handed them out that its GPUs are mock, the sampler opens no reader at all: the
    indices it was given would name the host's own GPUs on a machine that has some."""

    def no_reader(*_: Any) -> Any:
        raise AssertionError("a GPU reader was opened for a step on mock GPUs")

    monkeypatch.setattr(gpu, "NvmlReader", no_reader)
    monkeypatch.setattr(gpu, "NvidiaSmiReader", no_reader)
    monkeypatch.setattr(gpu.shutil, "which", lambda _name: "/usr/bin/nvidia-smi")
    reader = gpu.open_gpu_reader(prefer, {gpu.MOCK_ENV: gpu.MOCK_VALUE, "CUDA_VISIBLE_DEVICES": "0"})
    assert reader.source == "mock"
    assert reader.read() == {"measured": False, "reason": gpu.MOCK_REASON}
    # Any other value is not the mark: the readers are tried as before.
    with pytest.raises(AssertionError, match="a GPU reader was opened"):
        gpu.open_gpu_reader("nvidia-smi", {gpu.MOCK_ENV: "real"})
