"""Mock GPUs for the local node: a kubelet device plugin that advertises `nvidia.com/gpu`.

A stand-in, named so wherever its figures appear: there is no GPU behind these devices.
It follows what NVIDIA's k8s-device-plugin does through the kubelet's device-plugin API
(v1beta1, k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): it registers its resource with the
kubelet, lists its devices (IDs shaped like GPU UUIDs, all Healthy), and answers `Allocate`
with `NVIDIA_VISIBLE_DEVICES=<the allocated IDs>`, the variable the NVIDIA container runtime
reads; so a pod sees exactly the devices it was given, and the scheduler counts them as on a
GPU node. Like NVIDIA's test harness (k8s-test-infra's nvml-mock) and Run:ai's
fake-gpu-operator it fakes the devices, not the scheduling.

The gRPC messages are described here in Python (no generated code, no protoc): the field
names and numbers are checked against the pinned module's api.proto by
tests/unit/test_mockgpu.py.

    python -m localenv.mockgpu --plugin-dir <kubelet root>/device-plugins --count 4
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from infra.telemetry.gpu import MOCK_ENV, MOCK_VALUE

API_VERSION = "v1beta1"
RESOURCE = "nvidia.com/gpu"
KUBELET_SOCKET = "kubelet.sock"
SOCKET_NAME = "atlas-mock-gpu.sock"
# What every mock device is labelled as in outputs and reports.
PROVENANCE = "mock GPU (device-plugin stand-in, no GPU behind it)"

_STRING, _BOOL, _INT64, _INT32, _MESSAGE = 9, 8, 3, 5, 11
_OPTIONAL, _REPEATED = 1, 3

# (message, [(field, number, type, label, message type or None)]); map<string,string> fields are
# written as their entry messages, as protoc does.
_MESSAGES: list[tuple[str, list[tuple[str, int, int, int, str | None]]]] = [
    ("DevicePluginOptions", [("pre_start_required", 1, _BOOL, _OPTIONAL, None),
                             ("get_preferred_allocation_available", 2, _BOOL, _OPTIONAL, None)]),
    ("RegisterRequest", [("version", 1, _STRING, _OPTIONAL, None), ("endpoint", 2, _STRING, _OPTIONAL, None),
                         ("resource_name", 3, _STRING, _OPTIONAL, None),
                         ("options", 4, _MESSAGE, _OPTIONAL, "DevicePluginOptions")]),
    ("Empty", []),
    ("ListAndWatchResponse", [("devices", 1, _MESSAGE, _REPEATED, "Device")]),
    ("TopologyInfo", [("nodes", 1, _MESSAGE, _REPEATED, "NUMANode")]),
    ("NUMANode", [("ID", 1, _INT64, _OPTIONAL, None)]),
    ("Device", [("ID", 1, _STRING, _OPTIONAL, None), ("health", 2, _STRING, _OPTIONAL, None),
                ("topology", 3, _MESSAGE, _OPTIONAL, "TopologyInfo")]),
    ("PreStartContainerRequest", [("devices_ids", 1, _STRING, _REPEATED, None)]),
    ("PreStartContainerResponse", []),
    ("PreferredAllocationRequest", [("container_requests", 1, _MESSAGE, _REPEATED,
                                     "ContainerPreferredAllocationRequest")]),
    ("ContainerPreferredAllocationRequest", [("available_deviceIDs", 1, _STRING, _REPEATED, None),
                                             ("must_include_deviceIDs", 2, _STRING, _REPEATED, None),
                                             ("allocation_size", 3, _INT32, _OPTIONAL, None)]),
    ("PreferredAllocationResponse", [("container_responses", 1, _MESSAGE, _REPEATED,
                                      "ContainerPreferredAllocationResponse")]),
    ("ContainerPreferredAllocationResponse", [("deviceIDs", 1, _STRING, _REPEATED, None)]),
    ("AllocateRequest", [("container_requests", 1, _MESSAGE, _REPEATED, "ContainerAllocateRequest")]),
    ("ContainerAllocateRequest", [("devices_ids", 1, _STRING, _REPEATED, None)]),
    ("CDIDevice", [("name", 1, _STRING, _OPTIONAL, None)]),
    ("AllocateResponse", [("container_responses", 1, _MESSAGE, _REPEATED, "ContainerAllocateResponse")]),
    ("ContainerAllocateResponse", [
        ("envs", 1, _MESSAGE, _REPEATED, "ContainerAllocateResponse.EnvsEntry"),
        ("mounts", 2, _MESSAGE, _REPEATED, "Mount"),
        ("devices", 3, _MESSAGE, _REPEATED, "DeviceSpec"),
        ("annotations", 4, _MESSAGE, _REPEATED, "ContainerAllocateResponse.AnnotationsEntry"),
        ("cdi_devices", 5, _MESSAGE, _REPEATED, "CDIDevice"),
    ]),
    ("Mount", [("container_path", 1, _STRING, _OPTIONAL, None), ("host_path", 2, _STRING, _OPTIONAL, None),
               ("read_only", 3, _BOOL, _OPTIONAL, None)]),
    ("DeviceSpec", [("container_path", 1, _STRING, _OPTIONAL, None), ("host_path", 2, _STRING, _OPTIONAL, None),
                    ("permissions", 3, _STRING, _OPTIONAL, None)]),
]
_MAP_ENTRIES = {"ContainerAllocateResponse": ("EnvsEntry", "AnnotationsEntry")}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="atlas/localenv/deviceplugin_v1beta1.proto", package=API_VERSION, syntax="proto3"
    )
    for name, fields in _MESSAGES:
        message = proto.message_type.add(name=name)
        for entry in _MAP_ENTRIES.get(name, ()):
            nested = message.nested_type.add(name=entry)
            nested.options.map_entry = True
            nested.field.add(name="key", number=1, type=_STRING, label=_OPTIONAL, json_name="key")
            nested.field.add(name="value", number=2, type=_STRING, label=_OPTIONAL, json_name="value")
        for field_name, number, kind, label, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name is not None:
                field.type_name = f".{API_VERSION}.{type_name}"
    return proto


def _messages() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    file_descriptor = pool.Add(_file_descriptor())
    return {name: message_factory.GetMessageClass(file_descriptor.message_types_by_name[name])
            for name, _ in _MESSAGES}


MESSAGES = _messages()


def message_fields() -> dict[str, dict[str, tuple[int, bool]]]:
    """Each message's fields as (number, repeated): what the test holds against api.proto."""
    return {name: {f[0]: (f[1], f[3] == _REPEATED) for f in fields} for name, fields in _MESSAGES}


@dataclass(frozen=True)
class MockGpus:
    """The devices one node advertises."""

    node: str
    count: int

    def device_ids(self) -> list[str]:
        # Stable across restarts (a pod keeps its IDs), shaped like nvidia-smi's GPU UUIDs.
        return [f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'atlas-mock-gpu.{self.node}.{i}')}" for i in range(self.count)]


def allocate_envs(device_ids: Sequence[str]) -> dict[str, str]:
    """What a container given these devices sees: NVIDIA's variable, and Atlas's mark that they are mock."""
    return {"NVIDIA_VISIBLE_DEVICES": ",".join(device_ids), MOCK_ENV: MOCK_VALUE}


class DevicePluginService:
    """The DevicePlugin service of v1beta1, for mock devices."""

    def __init__(self, gpus: MockGpus, stop: threading.Event) -> None:
        self.gpus = gpus
        self.stop = stop
        self.allocations = 0

    def get_device_plugin_options(self, request: Any, context: grpc.ServicerContext) -> Any:
        return MESSAGES["DevicePluginOptions"](pre_start_required=False, get_preferred_allocation_available=False)

    def list_and_watch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        devices = [MESSAGES["Device"](ID=i, health="Healthy") for i in self.gpus.device_ids()]
        yield MESSAGES["ListAndWatchResponse"](devices=devices)
        # Mock devices never change health: hold the stream open until the plugin stops.
        while not self.stop.wait(5) and context.is_active():
            pass

    def get_preferred_allocation(self, request: Any, context: grpc.ServicerContext) -> Any:
        return MESSAGES["PreferredAllocationResponse"]()

    def allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        known = set(self.gpus.device_ids())
        responses = []
        for container in request.container_requests:
            unknown = [d for d in container.devices_ids if d not in known]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device(s) {', '.join(unknown)}")
            responses.append(MESSAGES["ContainerAllocateResponse"](envs=allocate_envs(container.devices_ids)))
        self.allocations += 1
        return MESSAGES["AllocateResponse"](container_responses=responses)

    def pre_start_container(self, request: Any, context: grpc.ServicerContext) -> Any:
        return MESSAGES["PreStartContainerResponse"]()

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn: Any, req: str, resp: str) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=MESSAGES[req].FromString, response_serializer=MESSAGES[resp].SerializeToString)

        methods = {
            "GetDevicePluginOptions": unary(self.get_device_plugin_options, "Empty", "DevicePluginOptions"),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.list_and_watch, request_deserializer=MESSAGES["Empty"].FromString,
                response_serializer=MESSAGES["ListAndWatchResponse"].SerializeToString),
            "GetPreferredAllocation": unary(self.get_preferred_allocation, "PreferredAllocationRequest",
                                            "PreferredAllocationResponse"),
            "Allocate": unary(self.allocate, "AllocateRequest", "AllocateResponse"),
            "PreStartContainer": unary(self.pre_start_container, "PreStartContainerRequest",
                                       "PreStartContainerResponse"),
        }
        return grpc.method_handlers_generic_handler(f"{API_VERSION}.DevicePlugin", methods)


def register(kubelet_socket: Path, endpoint: str, timeout: float = 10.0) -> None:
    """Tell the kubelet about the resource (Registration.Register); raises on refusal."""
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        call = channel.unary_unary(
            f"/{API_VERSION}.Registration/Register",
            request_serializer=MESSAGES["RegisterRequest"].SerializeToString,
            response_deserializer=MESSAGES["Empty"].FromString,
        )
        call(MESSAGES["RegisterRequest"](version=API_VERSION, endpoint=endpoint, resource_name=RESOURCE,
                                         options=MESSAGES["DevicePluginOptions"]()), timeout=timeout)


def serve(plugin_dir: Path, gpus: MockGpus, stop: threading.Event, log: logging.Logger) -> None:
    """Serve and register; start over whenever the kubelet restarts (it then removes every plugin
    socket in its folder and recreates kubelet.sock), as NVIDIA's plugin does."""
    while not stop.is_set():
        socket_path = plugin_dir / SOCKET_NAME
        socket_path.unlink(missing_ok=True)
        service = DevicePluginService(gpus, stop)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        server.add_generic_rpc_handlers((service.handler(),))
        server.add_insecure_port(f"unix://{socket_path}")
        server.start()
        kubelet = plugin_dir / KUBELET_SOCKET
        while not stop.is_set() and not kubelet.exists():
            stop.wait(0.5)
        try:
            if not stop.is_set():
                register(kubelet, SOCKET_NAME)
                log.info("registered %d mock %s with the kubelet (%s)", gpus.count, RESOURCE, kubelet)
                registered_at = kubelet.stat().st_ino
                # A kubelet restart recreates its socket (new inode) and removes ours.
                while not stop.wait(1):
                    if not socket_path.exists() or not kubelet.exists() or kubelet.stat().st_ino != registered_at:
                        log.info("the kubelet restarted: registering again")
                        break
        except grpc.RpcError as exc:
            log.warning("registration failed (%s); retrying", exc.details() if hasattr(exc, "details") else exc)
            stop.wait(1)
        finally:
            server.stop(grace=1).wait()
            socket_path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localenv.mockgpu", description=__doc__.splitlines()[0])
    parser.add_argument("--plugin-dir", type=Path, required=True, help="the kubelet's device-plugins folder")
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--node", default=os.uname().nodename)
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s mockgpu %(message)s")
    log = logging.getLogger("mockgpu")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log.info("%s: %d devices on node %s", PROVENANCE, args.count, args.node)
    started = time.monotonic()
    serve(args.plugin_dir, MockGpus(args.node, args.count), stop, log)
    log.info("stopped after %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
