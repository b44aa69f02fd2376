"""WorkloadImage: the image every Job of the run uses.

On OpenShift with `image.build`, an ImageStream and a BuildConfig (Docker strategy, this
repository as Git source, the workload's build context and Containerfile) build it inside the
project. When `pulumi up` awaits the build (`image.build.await`), the Jobs pull the image by the
digest the build pushed, read from the ImageStream's tag (`dockerImageReference`), so a new
image rolls the Jobs and an unchanged one leaves them be; otherwise by the tag's pull spec.
Without `image.build`, the pre-built `image.reference` is used as is. No data goes into the image: the Containerfile
copies code only, and the data arrives on the data PVC (staging.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.openshift.manifests import image_build
from infra.openshift.manifests.labels import RunIdentity
from infra.openshift.objects import KubernetesObject
from infra.openshift.settings import OpenShiftSettings
from infra.workload.model import Workload


@dataclass
class WorkloadImageArgs:
    workload: Workload
    settings: OpenShiftSettings
    identity: RunIdentity
    namespace: pulumi.Input[str]
    # The namespace's name as configured: the pull spec is computed from it, so it is known
    # in preview (the namespace resource's output is not, on a first `up`).
    namespace_name: str


class WorkloadImage(pulumi.ComponentResource):
    image: pulumi.Output[str]

    def __init__(self, name: str, args: WorkloadImageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:WorkloadImage", name, None, opts)
        settings = args.settings
        build = settings.image.build
        # What Jobs that pull the image must wait for (the ImageStream when it awaits its tag).
        self.ready: list[pulumi.Resource] = []
        self.image_stream: KubernetesObject | None = None
        self.build_config: KubernetesObject | None = None
        if build is None:
            if settings.image.reference is None:  # parse_openshift_settings guarantees one of the two
                raise ValueError("image: neither build nor reference is set")
            self.image = pulumi.Output.from_input(settings.image.reference)
        else:
            labels = args.identity.labels("image")
            stream_name = image_build.image_stream_name(args.workload.name, args.identity.stack)
            tag = image_build.image_tag(args.workload, build)
            child = pulumi.ResourceOptions(parent=self)
            # Named exactly: the BuildConfig's output and the Jobs' pull spec name it, and the
            # BuildConfig must not wait for it, because the ImageStream's own await (for the
            # tag) ends only when the build that BuildConfig starts has pushed.
            self.image_stream = KubernetesObject(
                f"{name}-stream",
                image_build.image_stream(
                    labels, args.namespace, stream_name, tag, build.await_image, build.timeout_seconds
                ),
                opts=child,
            )
            self.build_config = KubernetesObject(
                f"{name}-build",
                image_build.build_config(args.workload, build, labels, args.namespace, f"{stream_name}:{tag}"),
                # A ConfigChange trigger builds only when a BuildConfig is created: replacing it on
                # any spec change is what builds the changed image (its tag changes too).
                opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["spec"], delete_before_replace=True),
            )
            pull_spec = image_build.internal_pull_spec(args.namespace_name, stream_name, tag)
            if build.await_image:
                self.ready.append(self.image_stream)
                self.image = self.image_stream.status.apply(
                    lambda status: image_build.pushed_image(status, tag, pull_spec)
                )
            else:
                self.image = pulumi.Output.from_input(pull_spec)
        self.register_outputs({"image": self.image})
