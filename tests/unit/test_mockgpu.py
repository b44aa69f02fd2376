"""localenv/mockgpu.py: the mock-GPU device plugin speaks the kubelet's v1beta1 API as
the pinned k8s.io/kubelet module defines it, registers, lists its devices and allocates them.
(The real kubelet's side: tests/integration/test_local_node.py.)"""

from __future__ import annotations

import logging
import re
import tempfile
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from infra.toolchain.go import download_module
from infra.toolchain.pins import load_pins
from localenv import mockgpu


def proto_fields(text: str) -> dict[str, dict[str, tuple[int, bool]]]:
    """message -> field -> (number, repeated), from api.proto (map fields as their entries)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    found: dict[str, dict[str, tuple[int, bool]]] = {}
    for name, body in re.findall(r"message\s+(\w+)\s*\{([^}]*)\}", text):
        fields: dict[str, tuple[int, bool]] = {}
        for repeated, kind, field, number in re.findall(r"(repeated\s+)?([\w.<>, ]+?)\s+(\w+)\s*=\s*(\d+)\s*;", body):
            fields[field] = (int(number), bool(repeated) or kind.startswith("map<"))
        found[name] = fields
    return found


def test_the_messages_match_the_pinned_kubelet_api_proto():
    module = download_module("k8s.io/kubelet", load_pins().kubernetes_staging)
    text = (module / "pkg" / "apis" / "deviceplugin" / "v1beta1" / "api.proto").read_text()
    assert re.search(r"^package v1beta1;", text, re.M)
    assert proto_fields(text) == mockgpu.message_fields()


def test_device_ids_are_stable_and_distinct():
    ids = mockgpu.MockGpus("node-a", 4).device_ids()
    assert ids == mockgpu.MockGpus("node-a", 4).device_ids()
    assert len(set(ids)) == 4 and all(re.fullmatch(r"GPU-[0-9a-f-]{36}", i) for i in ids)
    assert set(ids).isdisjoint(mockgpu.MockGpus("node-b", 4).device_ids())


class FakeKubelet:
    """The kubelet's Registration service, recording what was registered (the real kubelet is in
    the integration test)."""

    def __init__(self) -> None:
        self.requests: list[object] = []
        self.registered = threading.Event()

    def register(self, request, context):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        self.registered.set()
        return mockgpu.MESSAGES["Empty"]()


def test_register_list_and_allocate_over_unix_sockets():
    # A short path: unix socket paths are limited to about 100 bytes.
    plugin_dir = Path(tempfile.mkdtemp(prefix="mgpu-", dir="/tmp"))
    kubelet = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1beta1.Registration", {
        "Register": grpc.unary_unary_rpc_method_handler(
            kubelet.register, request_deserializer=mockgpu.MESSAGES["RegisterRequest"].FromString,
            response_serializer=mockgpu.MESSAGES["Empty"].SerializeToString),
    }),))
    server.add_insecure_port(f"unix://{plugin_dir / mockgpu.KUBELET_SOCKET}")
    server.start()
    stop = threading.Event()
    gpus = mockgpu.MockGpus("node-a", 3)
    plugin = threading.Thread(target=mockgpu.serve, args=(plugin_dir, gpus, stop, logging.getLogger("t")))
    plugin.start()
    try:
        assert kubelet.registered.wait(10)
        (request,) = kubelet.requests
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1", mockgpu.SOCKET_NAME, "nvidia.com/gpu")
        with grpc.insecure_channel(f"unix://{plugin_dir / mockgpu.SOCKET_NAME}") as channel:
            listing = channel.unary_stream(
                "/v1beta1.DevicePlugin/ListAndWatch",
                request_serializer=mockgpu.MESSAGES["Empty"].SerializeToString,
                response_deserializer=mockgpu.MESSAGES["ListAndWatchResponse"].FromString,
            )(mockgpu.MESSAGES["Empty"](), timeout=5)
            first = next(iter(listing))
            assert [(d.ID, d.health) for d in first.devices] == [(i, "Healthy") for i in gpus.device_ids()]
            listing.cancel()
            allocate = channel.unary_unary(
                "/v1beta1.DevicePlugin/Allocate",
                request_serializer=mockgpu.MESSAGES["AllocateRequest"].SerializeToString,
                response_deserializer=mockgpu.MESSAGES["AllocateResponse"].FromString,
            )
            two = gpus.device_ids()[:2]
            reply = allocate(mockgpu.MESSAGES["AllocateRequest"](
                container_requests=[mockgpu.MESSAGES["ContainerAllocateRequest"](devices_ids=two)]), timeout=5)
            (container,) = reply.container_responses
            assert dict(container.envs) == {"NVIDIA_VISIBLE_DEVICES": ",".join(two), "ATLAS_GPU_PROVENANCE": "mock"}
            with pytest.raises(grpc.RpcError) as refused:
                allocate(mockgpu.MESSAGES["AllocateRequest"](
                    container_requests=[mockgpu.MESSAGES["ContainerAllocateRequest"](devices_ids=["GPU-x"])]),
                    timeout=5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        stop.set()
        plugin.join(10)
        server.stop(0)
    assert not plugin.is_alive()
    assert not (plugin_dir / mockgpu.SOCKET_NAME).exists()
