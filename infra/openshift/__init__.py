"""The OpenShift (or plain Kubernetes) side of a stack, as Pulumi components.

For a user's own Pulumi program: `OpenShiftEnvironment` and its `OpenShiftEnvironmentArgs`, the
cluster it targets (`KubernetesTarget`) and its settings (`openshift_settings(flavour, **keys)`:
the keys of a stack's `atlas:openshift`, with their defaults and checks). Exported lazily: the
config parsers import settings.py through this package and must not import Pulumi.
"""

from typing import TYPE_CHECKING

from infra.exports import lazy_exports

_EXPORTS = {
    "OpenShiftEnvironment": "infra.openshift.environment",
    "OpenShiftEnvironmentArgs": "infra.openshift.environment",
    "KubernetesTarget": "infra.openshift.target",
    "OpenShiftSettings": "infra.openshift.settings",
    "OpenShiftSettingsError": "infra.openshift.settings",
    "openshift_settings": "infra.openshift.settings_parser",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the real types for type checkers; `X as X` marks a re-export
    from infra.openshift.environment import OpenShiftEnvironment as OpenShiftEnvironment
    from infra.openshift.environment import OpenShiftEnvironmentArgs as OpenShiftEnvironmentArgs
    from infra.openshift.settings import OpenShiftSettings as OpenShiftSettings
    from infra.openshift.settings import OpenShiftSettingsError as OpenShiftSettingsError
    from infra.openshift.settings_parser import openshift_settings as openshift_settings
    from infra.openshift.target import KubernetesTarget as KubernetesTarget
