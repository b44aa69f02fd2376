"""GPU utilization and memory through NVML (nvidia-ml-py), else `nvidia-smi --query-gpu`.

Memory is `memory.used` and `memory.total`: what the seed should have recorded instead of
`utilization.memory`, which is the memory controller's busy time, not memory in use.
NVML's v2 memory query is preferred: its `used` leaves out the driver's reserved memory,
as nvidia-smi's `memory.used` does on current drivers; v1's `used` (total - free) counts it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Protocol

MIB = 1 << 20
NVIDIA_SMI_QUERY = "index,utilization.gpu,memory.used,memory.total"
NVIDIA_SMI_TIMEOUT_S = 10


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


class NvmlReader:
    source = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.names = [_text(nvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.memory_version = getattr(nvml, "nvmlMemory_v2", None)

    def _memory(self, handle: Any) -> tuple[int, int, str]:
        if self.memory_version is not None:
            try:
                info = self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.memory_version)
                return int(info.used), int(info.total), "v2"
            except self.nvml.NVMLError:
                self.memory_version = None  # an older driver: fall back for the rest of the run
        info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total), "v1"

    def read(self) -> dict[str, Any]:
        devices = []
        try:
            for index, handle in enumerate(self.handles):
                used, total, api = self._memory(handle)
                devices.append(
                    {
                        "index": index,
                        "name": self.names[index],
                        "utilization_percent": int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
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
            }
        )
    return devices


class NvidiaSmiReader:
    """One `nvidia-smi` run per sample: about 0.1 s of CPU, so only where NVML cannot be loaded."""

    source = "nvidia-smi"

    def __init__(self, executable: str) -> None:
        self.executable = executable

    def read(self) -> dict[str, Any]:
        command = [self.executable, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"]
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


def open_gpu_reader(prefer: str = "auto") -> GpuReader:
    """NVML, else nvidia-smi, else a reader that reports why neither works."""
    if prefer == "off":
        return Unavailable("GPU sampling turned off (--gpu off)")
    reasons = []
    if prefer in ("auto", "nvml"):
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            return NvmlReader(pynvml)
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
            return NvidiaSmiReader(executable)
    return Unavailable("; ".join(reasons))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int_or_none(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"
