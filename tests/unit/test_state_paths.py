"""What state written by earlier versions names stays valid: every dotted path a dynamic provider
was pickled under still imports to a provider class, and no dynamic resource's type changed.

tests/e2e/test_state_compat.py stands a real stack up on the commit before issue 29 and takes it
over; this is the cheap guard for every provider, the AWS ones included, that runs with the unit
tests.
"""

from __future__ import annotations

import importlib
import pkgutil

import pulumi.dynamic
import pytest

# dill pickles a provider into state by reference, `<module>.<class>`: refresh (`read`) and destroy
# (`delete`) of a resource that no `up` has updated since import exactly these names.
PICKLED_PROVIDER_PATHS = (
    # Since the HPC side's first providers.
    "infra.hpc.providers.StagedFilesProvider",
    "infra.hpc.providers.BatchJobProvider",
    "infra.hpc.providers.JobCompletionProvider",
    "infra.openshift.completion.JobCompletionProvider",
    # Before infra/aws/providers/ was split into a module per service.
    "infra.aws.providers.DataBucketProvider",
    "infra.aws.providers.StagedObjectsProvider",
    "infra.aws.providers.InstanceRoleProvider",
    "infra.aws.providers.KeyPairProvider",
    "infra.aws.providers.SecurityGroupProvider",
    "infra.aws.providers.InstanceProvider",
    # After that split (303f827, the commit before issue 29).
    "infra.aws.providers.s3.DataBucketProvider",
    "infra.aws.providers.s3.StagedObjectsProvider",
    "infra.aws.providers.iam.InstanceRoleProvider",
    "infra.aws.providers.key_pair.KeyPairProvider",
    "infra.aws.providers.security_group.SecurityGroupProvider",
    "infra.aws.providers.instance.InstanceProvider",
    # A swept step's arrays (issue 32).
    "infra.hpc.providers.sweep_job.SweepJobProvider",
    # A swept step's Indexed Job on the OpenShift side (issue 32).
    "infra.openshift.sweep_completion.SweepCompletionProvider",
    # The image build's completion on the OpenShift side (issue 34).
    "infra.openshift.build_completion.BuildCompletionProvider",
)

# `pulumi-python:<this>`: a resource's type is part of its URN; a changed one would create the
# resource anew beside the old (which destroy would then delete).
DYNAMIC_RESOURCE_TYPES = {
    "dynamic/hpc:StagedFiles",
    "dynamic/hpc:BatchJob",
    "dynamic/hpc:JobCompletion",
    "dynamic/hpc:SweepJob",
    "dynamic/hpc:SifImage",
    "dynamic/openshift:JobCompletion",
    "dynamic/openshift:SweepCompletion",
    "dynamic/openshift:BuildCompletion",
    "dynamic/aws:DataBucket",
    "dynamic/aws:StagedObjects",
    "dynamic/aws:InstanceRole",
    "dynamic/aws:KeyPair",
    "dynamic/aws:SecurityGroup",
    "dynamic/aws:Instance",
}


@pytest.mark.parametrize("path", PICKLED_PROVIDER_PATHS)
def test_pickled_provider_path_still_imports(path):
    module, _, name = path.rpartition(".")
    provider = getattr(importlib.import_module(module), name, None)
    assert isinstance(provider, type) and issubclass(provider, pulumi.dynamic.ResourceProvider), (
        f"{path} no longer names a provider class: state written before the move cannot be refreshed or "
        "destroyed; leave a re-export at the old path"
    )


def _every_subclass(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_every_subclass(sub)}
    return found


def test_dynamic_resource_types_unchanged():
    # Every module of the packages that build resources; the report, monitor and CLIs register none.
    for package in ("infra.hpc", "infra.openshift", "infra.aws", "infra.nodes", "infra.dynamic"):
        for module in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            importlib.import_module(module.name)
    types = {
        cls._resource_type_name
        for cls in _every_subclass(pulumi.dynamic.Resource)
        if cls.__module__.startswith("infra.")
    }
    # The bases every resource class derives from keep the SDK's default type (they register nothing).
    assert types - {"dynamic:Resource"} == DYNAMIC_RESOURCE_TYPES
