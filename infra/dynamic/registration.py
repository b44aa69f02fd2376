"""What a dynamic resource registers with, besides its provider: secret outputs, empty outputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import pulumi
import pulumi.dynamic


def secret_options(opts: pulumi.ResourceOptions | None, secret_outputs: Sequence[str]) -> pulumi.ResourceOptions:
    """`opts` with `secret_outputs` kept encrypted in state: they are secret on the way in (the
    component makes them so), and this keeps them secret on the way out too."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=list(secret_outputs)))


def with_outputs(inputs: Mapping[str, Any], outputs: Iterable[str]) -> dict[str, Any]:
    """The props to register: the inputs, and each output as None (so it is a typed Output)."""
    return {**inputs, **dict.fromkeys(outputs)}


class DynamicResource(pulumi.dynamic.Resource):
    """A dynamic resource registered with its inputs and its outputs (None until created), its
    `SECRET_OUTPUTS` kept encrypted in state."""

    SECRET_OUTPUTS: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        provider: pulumi.dynamic.ResourceProvider,
        name: str,
        inputs: Mapping[str, Any],
        outputs: Iterable[str],
        opts: pulumi.ResourceOptions | None,
    ) -> None:
        super().__init__(provider, name, with_outputs(inputs, outputs), secret_options(opts, self.SECRET_OUTPUTS))
