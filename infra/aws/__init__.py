"""AWS GPU capacity as a third environment: boto3 dynamic providers and `AwsEnvironment`.

- `settings.py`, `settings_parser.py`: the typed `atlas:aws` config of a stack, and its validation.
- `clients.py`: boto3 clients per process, and one function every AWS call goes through.
- `launch.py`: the instances' launch script (EC2 user data), rendered by pure functions.
- `providers/`: the dynamic resources, one module per AWS service.
- `components.py`: `AwsEnvironment`, the component a stack builds.
"""
