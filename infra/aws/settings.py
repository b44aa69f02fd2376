"""`atlas:aws`: the AWS side of a stack as frozen dataclasses, and the GPU instance types Atlas knows.

settings_parser.py validates a stack's `atlas:aws` section into `AwsSettings`; the components
and providers read only these types. The region and instance type tables are static: preview
must not need AWS to say a type is misspelt, and the instance types give the GPU count the
outputs and the report use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from infra.errors import AtlasConfigError
from infra.loopback import is_loopback_url

Market = Literal["on-demand", "spot"]
MARKETS: tuple[Market, ...] = ("on-demand", "spot")

# AWS's commercial regions (2026); GovCloud and China need other partitions and endpoints.
REGIONS = frozenset(
    {
        "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "ca-west-1",
        "sa-east-1", "mx-central-1",
        "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1", "eu-central-2", "eu-north-1",
        "eu-south-1", "eu-south-2",
        "ap-south-1", "ap-south-2", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2",
        "ap-northeast-3", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
        "ap-southeast-5", "ap-southeast-7",
        "me-south-1", "me-central-1", "il-central-1", "af-south-1",
    }
)  # fmt: skip


class AwsConfigError(AtlasConfigError):
    """An `atlas:aws` value that cannot be used; the message names the key and the fix."""


@dataclass(frozen=True)
class GpuInstanceType:
    name: str
    gpus: int
    gpu_product: str
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int


# NVIDIA GPU instance types Atlas can place the workload on; from AWS's instance type pages.
GPU_INSTANCE_TYPES: dict[str, GpuInstanceType] = {
    t.name: t
    for t in (
        GpuInstanceType("p3.2xlarge", 1, "Tesla-V100-SXM2-16GB", 16, 8, 61),
        GpuInstanceType("p3.8xlarge", 4, "Tesla-V100-SXM2-16GB", 16, 32, 244),
        GpuInstanceType("p3.16xlarge", 8, "Tesla-V100-SXM2-16GB", 16, 64, 488),
        GpuInstanceType("p3dn.24xlarge", 8, "Tesla-V100-SXM2-32GB", 32, 96, 768),
        GpuInstanceType("p4d.24xlarge", 8, "NVIDIA-A100-SXM4-40GB", 40, 96, 1152),
        GpuInstanceType("p4de.24xlarge", 8, "NVIDIA-A100-SXM4-80GB", 80, 96, 1152),
        GpuInstanceType("p5.48xlarge", 8, "NVIDIA-H100-80GB-HBM3", 80, 192, 2048),
        GpuInstanceType("g4dn.xlarge", 1, "Tesla-T4", 16, 4, 16),
        GpuInstanceType("g4dn.12xlarge", 4, "Tesla-T4", 16, 48, 192),
        GpuInstanceType("g5.xlarge", 1, "NVIDIA-A10G", 24, 4, 16),
        GpuInstanceType("g5.12xlarge", 4, "NVIDIA-A10G", 24, 48, 192),
        GpuInstanceType("g5.48xlarge", 8, "NVIDIA-A10G", 24, 192, 768),
        GpuInstanceType("g6.12xlarge", 4, "NVIDIA-L4", 24, 48, 192),
    )
}


@dataclass(frozen=True)
class AwsCredentials:
    """Keys from secret config; never in a repr. Both None: the standard AWS chain."""

    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    source: str = "the standard AWS credential chain"


@dataclass(frozen=True)
class AwsSettings:
    region: str
    endpoint_url: str | None
    instance_type: GpuInstanceType
    instance_count: int
    market: Market
    spot_max_price: float | None
    ami: str
    subnet_id: str | None
    root_volume_gib: int
    ssh_user: str
    ssh_public_key: str | None  # imported into a key pair; None: AWS creates one
    ssh_private_key_file: Path | None
    allowed_ssh_cidrs: tuple[str, ...]
    allow_ssh_from_anywhere: bool
    execute: bool
    not_executed_reason: str
    ready_timeout_s: float
    poll_interval_s: float
    wait_for: tuple[str, ...] | None
    credentials: AwsCredentials = field(default_factory=AwsCredentials, repr=False)

    @property
    def emulated(self) -> bool:
        """An endpoint on this machine's loopback (infra/loopback.py parses it): an AWS API stand-in
        (moto), whose instances run nothing."""
        return self.endpoint_url is not None and is_loopback_url(self.endpoint_url)

    @property
    def gpus(self) -> int:
        return self.instance_type.gpus * self.instance_count
