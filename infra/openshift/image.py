"""WorkloadImage: the image every Job of the run uses.

On OpenShift with `image.build`, an ImageStream and a BuildConfig (Docker strategy, this
repository as Git source, the workload's build context and Containerfile) build it inside the
project. When `pulumi up` awaits the build (`image.build.await`), a BuildCompletion
(build_completion.py) follows the Build the BuildConfig started: a failed, errored or cancelled
build ends `up` at once with its reason and the end of its log; a complete one gives the image by
the digest it pushed, read from the ImageStream's tag (`dockerImageReference`), which the Jobs
pull, so a new image rolls the Jobs and an unchanged one leaves them be. Not awaited, the Jobs
pull the tag's pull spec.
Without `image.build`, the pre-built `image.reference` is used as is. No data goes into the image: the Containerfile
copies code only, and the data arrives on the data PVC (staging.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.openshift.build_completion import BuildCompletion
from infra.openshift.completion import ApiAccess
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
    # How the build's completion reaches the API server (as the provider does).
    access: ApiAccess


class WorkloadImage(pulumi.ComponentResource):
    image: pulumi.Output[str]

    def __init__(self, name: str, args: WorkloadImageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:WorkloadImage", name, None, opts)
        settings = args.settings
        build = settings.image.build
        # What Jobs that pull the image must wait for (the build's completion when it is awaited).
        self.ready: list[pulumi.Resource] = []
        self.image_stream: KubernetesObject | None = None
        self.build_config: KubernetesObject | None = None
        self.build_completion: BuildCompletion | None = None
        if build is None:
            if settings.image.reference is None:  # parse_openshift_settings guarantees one of the two
                raise ValueError("image: neither build nor reference is set")
            self.image = pulumi.Output.from_input(settings.image.reference)
        else:
            labels = args.identity.labels("image")
            stream_name = image_build.image_stream_name(args.workload.name, args.identity.stack)
            tag = image_build.image_tag(args.workload, build)
            child = pulumi.ResourceOptions(parent=self)
            # Named exactly: the BuildConfig's output and the Jobs' pull spec name it.
            self.image_stream = KubernetesObject(
                f"{name}-stream", image_build.image_stream(labels, args.namespace, stream_name), opts=child
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
                self.build_completion = BuildCompletion(
                    f"{name}-built",
                    build_config=self.build_config,
                    image_stream=stream_name,
                    tag=tag,
                    # What a preview shows before the build ran: the push the stream's status (as
                    # last read) records for this tag, else the tag's pull spec.
                    known_image=self.image_stream.status.apply(
                        lambda status: image_build.pushed_image(status, tag, pull_spec)
                    ),
                    access=args.access,
                    timeout_s=build.timeout_seconds,
                    git_source=f"{build.git_uri} at {build.git_ref}",
                    # The build pushes to the stream: it must exist before the build can end.
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.image_stream]),
                )
                self.ready.append(self.build_completion)
                self.image = self.build_completion.image
            else:
                self.image = pulumi.Output.from_input(pull_spec)
        self.register_outputs({"image": self.image})
