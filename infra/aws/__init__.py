"""AWS GPU capacity as a third environment: boto3 dynamic providers and `AwsEnvironment`."""
