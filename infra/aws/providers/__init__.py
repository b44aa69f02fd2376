"""Pulumi dynamic resources over boto3, one module per AWS service:
- `s3.py`: the data bucket and the objects staged into it;
- `iam.py`: the instances' role and instance profile;
- `key_pair.py`, `security_group.py`, `instance.py`: EC2's key pair, security group, GPU instances;
- `common.py`: what every resource shares (common inputs, naming, diff, waiting, registration);
- `inputs.py`: the props read and checked (pure); `requests.py`: what is sent to AWS (pure);
  `answers.py`: what is read from AWS's answers (pure).

Lifecycle, as for the HPC side's batch jobs:
- preview: `check` refuses bad inputs (tolerating values not known yet) and `diff` says what
  is replaced and what is updated in place; the launch script is an input, shown line by line;
- up: each `create` names its AWS object from a prefix plus a random suffix (as Pulumi's own
  auto-naming does, so a replacement never collides with its predecessor) and tags it with the
  stack, run, environment and project;
- refresh: `read` asks AWS; an object deleted outside, or an instance terminated outside, reads
  back as gone (empty id), so the next `up` creates it again; an instance stopped outside reads
  back `stopped`, and the next `up` starts it;
- destroy: `delete` removes what `create` made; an object already gone is success.

Providers hold no live objects (dill pickles them into state): boto3 clients come from
infra/aws/clients.py's per-process cache. Credentials travel in the `aws_secret` input, which the
component makes a secret; `additional_secret_outputs` keeps it (and a created key pair's
private key) encrypted in state.

The provider classes are re-exported here on purpose: dill pickles a provider into state by
module and class name, and states written before the split name them `infra.aws.providers.<Class>`;
refresh and destroy of those resources unpickle that name.
"""

from infra.aws.providers.answers import ssh_cidrs_of
from infra.aws.providers.common import PROVIDER_VERSION, common_inputs
from infra.aws.providers.iam import InstanceRole, InstanceRoleProvider
from infra.aws.providers.instance import Instance, InstanceProvider, new_host_key
from infra.aws.providers.key_pair import KeyPair, KeyPairProvider
from infra.aws.providers.requests import read_policy
from infra.aws.providers.s3 import DataBucket, DataBucketProvider, StagedObjects, StagedObjectsProvider
from infra.aws.providers.security_group import SecurityGroup, SecurityGroupProvider

__all__ = [
    "PROVIDER_VERSION",
    "DataBucket",
    "DataBucketProvider",
    "Instance",
    "InstanceProvider",
    "InstanceRole",
    "InstanceRoleProvider",
    "KeyPair",
    "KeyPairProvider",
    "SecurityGroup",
    "SecurityGroupProvider",
    "StagedObjects",
    "StagedObjectsProvider",
    "common_inputs",
    "new_host_key",
    "read_policy",
    "ssh_cidrs_of",
]
