"""Atlas's one Pulumi program: load config, validate, build each enabled environment,
export the outputs contract (see docs/architecture.md)."""

import pulumi

from infra.config import AtlasConfigError, load_stack_config
from infra.openshift.environment import OpenShiftEnvironment, OpenShiftEnvironmentArgs

OUTPUTS_VERSION = 1

try:
    config = load_stack_config()
except AtlasConfigError as bad:
    # RunError: the message alone, no traceback; nothing has been registered yet.
    raise pulumi.RunError(f"invalid stack configuration: {bad}") from None
environments: dict[str, object] = {}

if config.openshift is not None:
    openshift = OpenShiftEnvironment(
        "openshift",
        OpenShiftEnvironmentArgs(target=config.openshift, stack=config.stack, workload=config.workload),
    )
    environments["openshift"] = {
        "kind": "kubernetes",
        "flavour": config.openshift.flavour,
        "api": openshift.api_url,
        "namespace": openshift.namespace,
    }

pulumi.export(
    "atlas",
    {"version": OUTPUTS_VERSION, "stack": config.stack, "workload": config.workload, "run_id": config.stack},
)
pulumi.export("environments", environments)
