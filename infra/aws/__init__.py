"""AWS GPU capacity as a third environment: boto3 dynamic providers and `AwsEnvironment`.

- `settings.py`, `settings_parser.py`: the typed `atlas:aws` config of a stack, and its validation.
- `clients.py`: boto3 clients per process, and one function every AWS call goes through.
- `launch.py`: the instances' launch script (EC2 user data), rendered by pure functions.
- `providers/`: the dynamic resources, one module per AWS service.
- `components.py`: `AwsEnvironment`, the component a stack builds.
"""

from typing import TYPE_CHECKING

from infra.exports import lazy_exports

# For a user's own Pulumi program: `from infra.aws import AwsEnvironment, AwsEnvironmentArgs, aws_settings`
# (the `aws` extra: boto3; without it, importing AwsEnvironment fails with one line naming the extra).
# Lazy: the config parsers import settings.py through this package and need neither boto3 nor Pulumi.
_EXPORTS = {
    "AwsEnvironment": "infra.aws.components",
    "AwsEnvironmentArgs": "infra.aws.components",
    "AwsSettings": "infra.aws.settings",
    "AwsConfigError": "infra.aws.settings",
    "aws_settings": "infra.aws.settings_parser",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the real types for type checkers; `X as X` marks a re-export
    from infra.aws.components import AwsEnvironment as AwsEnvironment
    from infra.aws.components import AwsEnvironmentArgs as AwsEnvironmentArgs
    from infra.aws.settings import AwsConfigError as AwsConfigError
    from infra.aws.settings import AwsSettings as AwsSettings
    from infra.aws.settings_parser import aws_settings as aws_settings
