"""What AWS computes and answers, for the offline mocks (see offline/mocks.py)."""

from __future__ import annotations

ACCOUNT = "123456789012"
PARTITION = "aws"


def _arn(service: str, region: str, resource: str) -> str:
    return f"arn:{PARTITION}:{service}:{region}:{ACCOUNT}:{resource}"


# Provider type token → id prefix of the resource's physical id.
ID_PREFIXES: dict[str, str] = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
}

# Provider type token → fn(name, inputs, id) → computed outputs.
COMPUTED: dict = {}

# Invoke token → fn(args) → result.
LOOKUPS: dict = {
    "aws:index/getCallerIdentity:getCallerIdentity": lambda args: {
        "accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/ci", "userId": "AIDAEXAMPLE", "id": ACCOUNT,
    },
    "aws:index/getPartition:getPartition": lambda args: {
        "partition": PARTITION, "dnsSuffix": "amazonaws.com", "id": PARTITION,
    },
}
