"""GPU utilization and memory through NVML (nvidia-ml-py), else `nvidia-smi --query-gpu`.

Memory is `memory.used` and `memory.total`: what the seed should have recorded instead of
`utilization.memory`, which is the memory controller's busy time, not memory in use.
NVML's v2 memory query is preferred: its `used` leaves out the driver's reserved memory,
as nvidia-smi's `memory.used` does on current drivers; v1's `used` (total - free) counts it.

Utilization through NVML is the mean of the driver's own samples since the previous reading
(`nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)`, a ring buffer of one value per driver
sample period), not one instantaneous reading: `nvmlDeviceGetUtilizationRates` covers only the
driver's last sample period (1/6 s to 1 s by GPU), so a load that cycles at about the sampling
interval aliases (read on an H200: 0 % for a 55 % busy load in 1 s cycles). Where the buffer
has no new sample or the GPU does not support it, the reading is the instantaneous one, and
the record says which (`utilization_method`).

Only the job's GPUs are read: those CUDA_VISIBLE_DEVICES names (indices or GPU-UUIDs, as
Slurm, LSF and the NVIDIA container runtime set it), all that NVML sees where it is unset.

A step given mock GPUs is told so by what handed them out (`ATLAS_GPU_PROVENANCE=mock`: the
local node's device plugin in its Allocate answer, the local Slurm's TaskProlog for its jobs):
then nothing is read, since the indices it was given would name the host's own GPUs, if it has
any, and their use is not the step's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MIB = 1 << 20
NVIDIA_SMI_QUERY = "index,utilization.gpu,memory.used,memory.total"
NVIDIA_SMI_TIMEOUT_S = 10
# Set by whatever handed the step mock GPUs (localenv/mockgpu.py, the local Slurm's TaskProlog).
MOCK_ENV = "ATLAS_GPU_PROVENANCE"
MOCK_VALUE = "mock"
MOCK_REASON = (
    f"mock GPUs ({MOCK_ENV}={MOCK_VALUE}: the GPUs this step was given are mock, no GPU is behind them; "
    "the host's own GPUs, if any, are not the step's and are not read)"
)


def not_measured(reason: str) -> dict[str, Any]:
    return {"measured": False, "reason": reason}


class GpuReader(Protocol):
    source: str

    def read(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class Unavailable:
    reason: str
    source: str = "none"

    def read(self) -> dict[str, Any]:
        return not_measured(self.reason)

    def close(self) -> None:
        return None


def select_visible(visible: str | None, uuids: Sequence[str]) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES names (pure); every GPU where it is unset.

    Entries are indices or (prefixes of) GPU UUIDs; CUDA stops at the first entry it cannot
    use, and so does this. Indices are NVML's (PCI bus) order: CUDA's own order matches it
    under CUDA_DEVICE_ORDER=PCI_BUS_ID, and schedulers hand out indices in that order.
    """
    if visible is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit():
            index = int(entry)
            if index >= len(uuids):
                break
        else:
            matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        if index in chosen:
            break
        chosen.append(index)
    return chosen


def mean_since(samples: Sequence[tuple[int, float]], since_us: int) -> tuple[float | None, int, int]:
    """Mean of the (timestamp in microseconds, value) samples after since_us (pure).

    Returns the mean (None without a new sample), how many samples it covers and the newest
    timestamp seen, from which the next reading starts.
    """
    fresh = [(t, v) for t, v in samples if t > since_us]
    if not fresh:
        return None, 0, since_us
    return sum(v for _, v in fresh) / len(fresh), len(fresh), max(t for t, _ in fresh)


class NvmlReader:
    source = "nvml"

    def __init__(
        self,
        nvml: Any,
        visible: str | None = None,
        clock_us: Callable[[], int] = lambda: int(time.time() * 1e6),
    ) -> None:
        self.nvml = nvml
        every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.indices = select_visible(visible, [_text(nvml.nvmlDeviceGetUUID(h)) for h in every])
        self.handles = [every[i] for i in self.indices]
        self.names = [_text(nvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.memory_version = getattr(nvml, "nvmlMemory_v2", None)
        # The first reading covers what follows the reader's start, as every later one
        # covers what follows the one before (NVML's sample timestamps are the host's clock).
        self.last_sample_us = [clock_us()] * len(self.handles)
        self.samples_supported = [True] * len(self.handles)

    def _memory(self, handle: Any) -> tuple[int, int, str]:
        if self.memory_version is not None:
            try:
                info = self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.memory_version)
                return int(info.used), int(info.total), "v2"
            except self.nvml.NVMLError:
                self.memory_version = None  # an older driver: fall back for the rest of the run
        info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total), "v1"

    def _utilization(self, slot: int, handle: Any) -> tuple[float, str, int]:
        """(percent, method, samples): the mean of NVML's samples since the last reading."""
        if self.samples_supported[slot]:
            try:
                _kind, raw = self.nvml.nvmlDeviceGetSamples(
                    handle, self.nvml.NVML_GPU_UTILIZATION_SAMPLES, self.last_sample_us[slot]
                )
                samples = [(int(s.timeStamp), float(s.sampleValue.uiVal)) for s in raw]
                mean, count, self.last_sample_us[slot] = mean_since(samples, self.last_sample_us[slot])
                if mean is not None:
                    return round(mean, 2), "nvml-samples", count
            except self.nvml.NVMLError as error:
                # NOT_FOUND: no sample since the last reading (an interval shorter than the
                # driver's sample period); anything else: this GPU or driver has no buffer.
                if not isinstance(error, getattr(self.nvml, "NVMLError_NotFound", ())):
                    self.samples_supported[slot] = False
        return float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu), "nvml-instant", 1

    def read(self) -> dict[str, Any]:
        if not self.handles:
            return not_measured("CUDA_VISIBLE_DEVICES names no GPU that NVML sees: the job has none")
        devices = []
        try:
            for slot, handle in enumerate(self.handles):
                used, total, api = self._memory(handle)
                utilization, method, count = self._utilization(slot, handle)
                devices.append(
                    {
                        "index": self.indices[slot],
                        "name": self.names[slot],
                        "utilization_percent": utilization,
                        "utilization_method": method,
                        "utilization_samples": count,
                        "memory_used_bytes": used,
                        "memory_total_bytes": total,
                        "memory_api": api,
                    }
                )
        except self.nvml.NVMLError as error:
            return not_measured(f"NVML query failed: {error}")
        if not devices:
            return not_measured("NVML sees no GPU")
        return {"measured": True, "source": self.source, "devices": devices}

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


def parse_nvidia_smi_query(text: str) -> list[dict[str, Any]]:
    """Rows of `--query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`."""
    devices = []
    for line in text.strip().splitlines():
        index, utilization, used, total = (part.strip() for part in line.split(","))
        devices.append(
            {
                "index": int(index),
                "utilization_percent": _int_or_none(utilization),
                "memory_used_bytes": None if _int_or_none(used) is None else int(used) * MIB,
                "memory_total_bytes": None if _int_or_none(total) is None else int(total) * MIB,
                "memory_api": "nvidia-smi (MiB)",
                # nvidia-smi prints NVML's instantaneous reading: the last driver sample period.
                "utilization_method": "nvidia-smi-instant",
            }
        )
    return devices


class NvidiaSmiReader:
    """One `nvidia-smi` run per sample: about 0.1 s of CPU, so only where NVML cannot be loaded."""

    source = "nvidia-smi"

    def __init__(self, executable: str, visible: str | None = None) -> None:
        self.executable = executable
        self.visible = visible

    def read(self) -> dict[str, Any]:
        if self.visible is not None and not self.visible.strip():
            return not_measured("CUDA_VISIBLE_DEVICES is empty: the job has no GPU")
        command = [self.executable, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"]
        if self.visible is not None:
            command.append(f"--id={self.visible}")  # only the job's GPUs (indices or UUIDs)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            return not_measured(f"nvidia-smi failed: {error}")
        if result.returncode != 0:
            return not_measured(
                f"nvidia-smi exited {result.returncode}: {result.stderr.strip() or result.stdout.strip()}"
            )
        try:
            devices = parse_nvidia_smi_query(result.stdout)
        except ValueError as error:
            return not_measured(f"nvidia-smi printed what Atlas cannot read ({error}): {result.stdout[:200]!r}")
        if not devices:
            return not_measured("nvidia-smi lists no GPU")
        return {"measured": True, "source": self.source, "devices": devices}

    def close(self) -> None:
        return None


def open_gpu_reader(prefer: str = "auto", environ: Mapping[str, str] | None = None) -> GpuReader:
    """NVML, else nvidia-smi, else a reader that reports why neither works; none for a step on
    mock GPUs (`environ`'s MOCK_ENV)."""
    if prefer == "off":
        return Unavailable("GPU sampling turned off (--gpu off)")
    if (environ if environ is not None else os.environ).get(MOCK_ENV) == MOCK_VALUE:
        return Unavailable(MOCK_REASON, source="mock")
    reasons = []
    if prefer in ("auto", "nvml"):
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            return NvmlReader(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except ImportError:
            reasons.append("NVML: nvidia-ml-py is not installed")
        except Exception as error:  # noqa: BLE001 (pynvml raises NVMLError subclasses and OSError)
            name = type(error).__name__
            if "LibraryNotFound" in name:
                reasons.append("no NVIDIA driver: libnvidia-ml.so.1 not found")
            elif "DriverNotLoaded" in name:
                reasons.append("no NVIDIA driver loaded (NVML: driver not loaded)")
            else:
                reasons.append(f"NVML: {error}")
    if prefer in ("auto", "nvidia-smi"):
        executable = shutil.which("nvidia-smi")
        if executable is None:
            reasons.append("nvidia-smi is not on PATH")
        else:
            return NvidiaSmiReader(executable, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return Unavailable("; ".join(reasons))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int_or_none(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"
