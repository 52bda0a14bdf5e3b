"""What AWS computes and answers, for the offline mocks (see gpu_cluster/engine/__init__.py).

Every value is derived from the logical name, the inputs or the id, so a render is deterministic.
Instances copy the subnet, security groups and zone from their launch template's primary network
interface, as EC2 reports them after launch.
"""

from __future__ import annotations

import hashlib

import pulumi

ACCOUNT = "123456789012"
PARTITION = "aws"
# A realistic Deep Learning AMI id (the SSM public parameter's value) and its root device.
DLAMI_ID = "ami-0c7217cdde317cfec"
DLAMI_ROOT_DEVICE = "/dev/sda1"


def _region() -> str:
    return pulumi.Config("aws").get("region") or "us-east-1"


def _cluster_zone() -> str:
    cluster = pulumi.Config("gpu-cluster").get_object("cluster") or {}
    return str(cluster.get("zone") or _region() + "a")


# DescribeCapacityReservations filter names and the attributes a match therefore has.
_FILTER_ATTRS = {"instance-type": "instanceType", "availability-zone": "availabilityZone"}


def _hex(*parts: str, n: int = 8) -> str:
    return hashlib.sha256("::".join(parts).encode()).hexdigest()[:n]


def _arn(service: str, resource: str, region: bool = True, account: bool = True) -> str:
    return f"arn:{PARTITION}:{service}:{_region() if region else ''}:{ACCOUNT if account else ''}:{resource}"


def _autoname(name: str, inputs: dict, key: str = "name") -> str:
    """A physical name as Pulumi auto-names it: the logical name plus a random-looking suffix."""
    return inputs.get(key) or f"{name}-{_hex(name, n=7)}"


# Launch template id → its primary network interface (subnet, security groups) and zone.
_TEMPLATES: dict[str, dict] = {}


def _launch_template(name: str, inputs: dict, rid: str) -> dict:
    nics = inputs.get("networkInterfaces") or []
    primary = next((n for n in nics if not n.get("networkCardIndex") and not n.get("deviceIndex")), {})
    _TEMPLATES[rid] = {"subnetId": primary.get("subnetId"), "securityGroups": primary.get("securityGroups") or [],
                       "zone": (inputs.get("placement") or {}).get("availabilityZone")}
    return {"arn": _arn("ec2", f"launch-template/{rid}"), "latestVersion": 1, "defaultVersion": 1,
            "name": _autoname(name, inputs)}


def _instance(name: str, inputs: dict, rid: str) -> dict:
    template = _TEMPLATES.get((inputs.get("launchTemplate") or {}).get("id"), {})
    h = int(_hex(name), 16)
    # A given private_ip is the instance's address (EC2 RunInstances PrivateIpAddress); otherwise one is picked.
    ip = inputs.get("privateIp") or f"10.{h % 200 + 20}.{(h >> 8) % 128}.{(h >> 16) % 250 + 4}"
    out = {
        "arn": _arn("ec2", f"instance/{rid}"),
        "availabilityZone": inputs.get("availabilityZone") or template.get("zone"),
        "instanceState": "running",
        "privateIp": ip,
        "privateDns": f"ip-{ip.replace('.', '-')}.ec2.internal",
        "primaryNetworkInterfaceId": f"eni-{_hex(name, 'eni', n=17)}",
        "instanceLifecycle": "spot" if inputs.get("instanceMarketOptions") else "",
    }
    if template.get("subnetId"):
        out["subnetId"] = template["subnetId"]
        out["vpcSecurityGroupIds"] = template["securityGroups"]
    return out


def _bucket(name: str, inputs: dict, rid: str) -> dict:
    bucket = inputs.get("bucket") or rid
    return {"bucket": bucket, "arn": f"arn:{PARTITION}:s3:::{bucket}",
            "bucketDomainName": f"{bucket}.s3.amazonaws.com",
            "bucketRegionalDomainName": f"{bucket}.s3.{_region()}.amazonaws.com", "region": _region()}


def _lustre(name: str, inputs: dict, rid: str) -> dict:
    return {"arn": _arn("fsx", f"file-system/{rid}"), "dnsName": f"{rid}.fsx.{_region()}.amazonaws.com",
            "mountName": _hex(name, "mount"), "networkInterfaceIds": [f"eni-{_hex(name, 'fsx', n=17)}"],
            "ownerId": ACCOUNT}


def _named_arn(service: str, template: str, region: bool = True, account: bool = True):
    """A computed-outputs function giving `name` (auto-named when absent) and an ARN built from it."""
    def compute(name: str, inputs: dict, rid: str) -> dict:
        physical = _autoname(name, inputs)
        return {"name": physical, "arn": _arn(service, template.format(name=physical, id=rid), region, account)}
    return compute


def _id_arn(service: str, template: str, region: bool = True, account: bool = True):
    """A computed-outputs function giving an ARN built from the resource id."""
    return lambda name, inputs, rid: {"arn": _arn(service, template.format(id=rid), region, account)}


# Provider type token → id prefix of the resource's physical id.
ID_PREFIXES: dict[str, str] = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/internetGateway:InternetGateway": "igw-",
    "aws:ec2/eip:Eip": "eipalloc-",
    "aws:ec2/natGateway:NatGateway": "nat-",
    "aws:ec2/routeTable:RouteTable": "rtb-",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc-",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce-",
    "aws:ec2/flowLog:FlowLog": "fl-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr-",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr-",
    "aws:ec2/placementGroup:PlacementGroup": "pg-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/instance:Instance": "i-",
    "aws:ebs/volume:Volume": "vol-",
    "aws:ec2/volumeAttachment:VolumeAttachment": "vai-",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "fs-",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "dra-",
    "aws:dlm/lifecyclePolicy:LifecyclePolicy": "policy-",
}

# Provider type token → fn(name, inputs, id) → computed outputs.
COMPUTED: dict = {
    "aws:ec2/vpc:Vpc": lambda name, inputs, rid: {
        "arn": _arn("ec2", f"vpc/{rid}"), "mainRouteTableId": f"rtb-{_hex(name, 'main', n=17)}",
        "defaultSecurityGroupId": f"sg-{_hex(name, 'default', n=17)}", "ownerId": ACCOUNT},
    "aws:ec2/subnet:Subnet": lambda name, inputs, rid: {
        "arn": _arn("ec2", f"subnet/{rid}"), "availabilityZoneId": "use1-az1", "ownerId": ACCOUNT},
    "aws:ec2/eip:Eip": lambda name, inputs, rid: {
        "allocationId": rid, "publicIp": f"3.{int(_hex(name), 16) % 250}.{int(_hex(name, 'b'), 16) % 250}.10"},
    "aws:ec2/natGateway:NatGateway": lambda name, inputs, rid: {"publicIp": "3.0.0.10", "privateIp": "10.0.128.10"},
    "aws:ec2/vpcEndpoint:VpcEndpoint": lambda name, inputs, rid: {
        "arn": _arn("ec2", f"vpc-endpoint/{rid}"), "prefixListId": "pl-63a5400a", "state": "available"},
    "aws:ec2/flowLog:FlowLog": _id_arn("ec2", "vpc-flow-log/{id}"),
    "aws:ec2/securityGroup:SecurityGroup": lambda name, inputs, rid: {
        "arn": _arn("ec2", f"security-group/{rid}"), "name": _autoname(name, inputs), "ownerId": ACCOUNT},
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _id_arn("ec2", "security-group-rule/{id}"),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": _id_arn("ec2", "security-group-rule/{id}"),
    "aws:ec2/placementGroup:PlacementGroup": lambda name, inputs, rid: {
        "name": _autoname(name, inputs), "placementGroupId": rid,
        "arn": _arn("ec2", f"placement-group/{_autoname(name, inputs)}")},
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:ec2/instance:Instance": _instance,
    "aws:ebs/volume:Volume": _id_arn("ec2", "volume/{id}"),
    "aws:cloudwatch/logGroup:LogGroup": _named_arn("logs", "log-group:{name}"),
    # A role's ARN carries its path: arn:aws:iam::<account>:role/<path without its first />name (IAM user
    # guide, "IAM identifiers": docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html).
    "aws:iam/role:Role": lambda name, inputs, rid: {
        "name": inputs.get("name") or rid,
        "arn": _arn("iam", f"role{inputs.get('path') or '/'}{inputs.get('name') or rid}", region=False),
        "uniqueId": f"AROA{_hex(name, n=17).upper()}"},
    "aws:iam/instanceProfile:InstanceProfile": _named_arn("iam", "instance-profile/{name}", region=False),
    "aws:iam/policy:Policy": lambda name, inputs, rid: {
        **_named_arn("iam", "policy/{name}", region=False)(name, inputs, rid),
        "policyId": f"ANPA{_hex(name, n=17).upper()}"},
    "aws:ssm/parameter:Parameter": _named_arn("ssm", "parameter/{name}"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre,
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": lambda name, inputs, rid: {
        "associationId": rid, "arn": _arn("fsx", f"association/{inputs.get('fileSystemId')}/{rid}")},
    "aws:s3/bucket:Bucket": _bucket,
    "aws:dlm/lifecyclePolicy:LifecyclePolicy": _id_arn("dlm", "policy/{id}"),
    "aws:sns/topic:Topic": _named_arn("sns", "{name}"),
    "aws:sns/topicSubscription:TopicSubscription": lambda name, inputs, rid: {
        "arn": f"{inputs.get('topic')}:{_hex(name, n=8)}-{_hex(name, 'sub', n=4)}", "pendingConfirmation": True},
    "aws:budgets/budget:Budget": lambda name, inputs, rid: {
        "name": _autoname(name, inputs), "arn": _arn("budgets", f"budget/{_autoname(name, inputs)}", region=False),
        "accountId": ACCOUNT},
    "aws:cloudwatch/metricAlarm:MetricAlarm": _named_arn("cloudwatch", "alarm:{name}"),
    # Secrets Manager appends six random characters to a secret's name in its ARN (Secrets Manager user
    # guide, "Secret ARN": arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>).
    "aws:secretsmanager/secret:Secret": lambda name, inputs, rid: {
        "name": _autoname(name, inputs),
        "arn": _arn("secretsmanager", f"secret:{_autoname(name, inputs)}-{_hex(name, 'secret', n=6)}")},
    "aws:costexplorer/costAllocationTag:CostAllocationTag": lambda name, inputs, rid: {"type": "UserDefined"},
}

# Invoke token → fn(args) → result.
def _type_offerings(args: dict) -> dict:
    wanted = {f["name"]: list(f.get("values") or []) for f in args.get("filters") or []}
    pairs = [(t, z) for t in wanted.get("instance-type", []) for z in wanted.get("location", [_cluster_zone()])]
    return {"id": _region(), "instanceTypes": [t for t, _ in pairs], "locations": [z for _, z in pairs],
            "locationTypes": [args.get("locationType") or "region"] * len(pairs)}


LOOKUPS: dict = {
    "aws:index/getCallerIdentity:getCallerIdentity": lambda args: {
        "accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/ci", "userId": "AIDAEXAMPLE", "id": ACCOUNT,
    },
    "aws:index/getPartition:getPartition": lambda args: {
        "partition": PARTITION, "dnsSuffix": "amazonaws.com", "id": PARTITION,
    },
    "aws:ssm/getParameter:getParameter": lambda args: {
        "name": args.get("name"), "id": args.get("name"), "type": "String", "value": DLAMI_ID,
        "insecureValue": DLAMI_ID, "version": 1, "arn": _arn("ssm", f"parameter{args.get('name')}", account=False),
    },
    "aws:ec2/getAmi:getAmi": lambda args: {
        "id": (args.get("filters") or [{}])[0].get("values", [DLAMI_ID])[0], "architecture": "x86_64",
        "rootDeviceName": DLAMI_ROOT_DEVICE, "rootDeviceType": "ebs", "virtualizationType": "hvm",
        "enaSupport": True, "ownerId": "898082745236", "state": "available",
    },
    # The type in the zone, as DescribeInstanceTypeOfferings answers the program's filters (instance-type,
    # location) where the account has it (ec2_instance_type_offerings_data_source.go: id = the region).
    "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": _type_offerings,
    # One offering for the requested dates, in the cluster's zone: the lookup as it answers when AWS has
    # the block the stack asks for (when it has none, or several, the real lookup fails `pulumi up`).
    "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering": lambda args: {
        "capacityBlockOfferingId": f"cb-{_hex(str(args.get('instanceType')), str(args.get('startDateRange')), n=17)}",
        "availabilityZone": _cluster_zone(), "currencyCode": "USD", "tenancy": "default",
        "upfrontFee": "0.00",
    },
    # The block the stack names, as the lookup answers once it has started: the program filters by its
    # instance type and zone, so a matching block reports those (a block that does not match, or no
    # block, fails the real lookup and `pulumi preview`).
    "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation": lambda args: {
        "id": args.get("id"), "state": "active", "reservationType": "capacity-block",
        **{_FILTER_ATTRS[f["name"]]: f["values"][0] for f in args.get("filters") or [] if f.get("name") in _FILTER_ATTRS},
    },
    "aws:ec2/getSubnet:getSubnet": lambda args: {
        "id": args.get("id"), "arn": _arn("ec2", f"subnet/{args.get('id')}"),
        "vpcId": f"vpc-{_hex(str(args.get('id')), 'vpc', n=17)}", "availabilityZone": _region() + "a",
        "cidrBlock": "10.99.0.0/20", "mapPublicIpOnLaunch": False, "defaultForAz": False, "ownerId": ACCOUNT,
    },
}
