"""Pulumi's mocks as the unit tests of the environments' components use them.

Each resource is recorded (`resources`, in the order the program made them) and answered with its
inputs as outputs, plus what a subclass's `outputs` adds for its type (a job's id, an instance's
address). Invokes answer nothing. (openshift_fixtures.RecordingMocks is the Kubernetes side's: it
fills in what the Kubernetes provider would and records through a monitor.)
"""

from __future__ import annotations

from typing import Any, Self

import pulumi


class ResourceMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", {**args.inputs, **self.outputs(args)}

    def outputs(self, args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
        """What the provider would add to `args`' inputs (`resources` holds `args` already)."""
        return {}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def install(self) -> Self:
        """These mocks for the Pulumi programs the test runs next, not previewing."""
        pulumi.runtime.set_mocks(self, preview=False)
        return self
