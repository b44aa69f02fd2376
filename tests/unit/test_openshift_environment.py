"""OpenShiftEnvironment under Pulumi mocks: the objects it declares, resolved."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from infra.config import KubernetesTarget


class Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append(args)
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


@pytest.fixture
def mocks():
    m = Mocks()
    pulumi.runtime.set_mocks(m, preview=False)
    yield m


@pulumi.runtime.test
def test_namespace_is_labelled_and_named_exactly(mocks, tmp_path: Path):
    from infra.openshift.environment import OpenShiftEnvironment, OpenShiftEnvironmentArgs

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:16443'}\n"
        "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n"
    )
    target = KubernetesTarget(flavour="kubernetes", namespace="atlas-test", kubeconfig_path=kubeconfig, context=None)
    env = OpenShiftEnvironment("openshift", OpenShiftEnvironmentArgs(target=target, stack="unit", workload="probe"))

    def check(values: list[object]) -> None:
        namespace, api_url = values
        assert namespace == "atlas-test"
        assert api_url == "https://127.0.0.1:16443"
        by_type = {r.typ: r for r in mocks.resources}
        ns = by_type["kubernetes:core/v1:Namespace"]
        assert ns.name == "openshift-namespace"
        labels = ns.inputs["metadata"]["labels"]
        assert labels == {
            "app.kubernetes.io/managed-by": "atlas",
            "atlas.dev/stack": "unit",
            "atlas.dev/workload": "probe",
        }
        provider = by_type["pulumi:providers:kubernetes"]
        assert provider.inputs["kubeconfig"] == str(kubeconfig)

    return pulumi.Output.all(env.namespace, env.api_url).apply(check)
