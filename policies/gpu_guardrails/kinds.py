"""The one table that maps every resource type through which a program runs machines to capacity records.

A `Kind` lists, for one type token, the property paths each field of a record is read from: instance
types, `instanceRequirements`, counts, the subnets and network interfaces it touches, zones, launch
templates, tags, public addressing and the purchase option. Paths are schema (camelCase) names, `[]`
after a list: `launchTemplateConfigs[].overrides[].subnetId`. tests/test_policy_kinds.py checks every
path against the locked SDKs' own classes (pulumi-aws 7.51.1, tencentcloud-iac-pulumi 0.2.3, and
pulumi-aws-native 1.84.0 for the aws-native types), so a path the provider does not have fails a test.

Types that only place a workload or an interface in a subnet (a Lambda function, an RDS subnet group, a
load balancer...) are in `placements.py`, generated from the same SDKs.
"""

from __future__ import annotations

from dataclasses import dataclass

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SPOT_REQUEST = "aws:ec2/spotInstanceRequest:SpotInstanceRequest"
AWS_ASG = "aws:autoscaling/group:Group"
AWS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
AWS_FLEET = "aws:ec2/fleet:Fleet"
AWS_SPOT_FLEET = "aws:ec2/spotFleetRequest:SpotFleetRequest"
AWS_BATCH = "aws:batch/computeEnvironment:ComputeEnvironment"
AWS_NOTEBOOK = "aws:sagemaker/notebookInstance:NotebookInstance"
AWS_EMR = "aws:emr/cluster:Cluster"
AWSN_INSTANCE = "aws-native:ec2:Instance"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_INSTANCE_SET = "tencentcloud:Instance/set:Set"
TC_SCALING_GROUP = "tencentcloud:As/scalingGroup:ScalingGroup"
TC_NODE_POOL = "tencentcloud:Kubernetes/nodePool:NodePool"
TC_NATIVE_POOL = "tencentcloud:Kubernetes/nativeNodePool:NativeNodePool"
TC_K8S_CLUSTER = "tencentcloud:Kubernetes/cluster:Cluster"
TC_SCALE_WORKER = "tencentcloud:Kubernetes/scaleWorker:ScaleWorker"

# Network interfaces, their attachments, and what holds a machine stopped.
AWS_ENI = "aws:ec2/networkInterface:NetworkInterface"
AWS_ENI_ATTACHMENT = "aws:ec2/networkInterfaceAttachment:NetworkInterfaceAttachment"
TC_ENI = "tencentcloud:Eni/instance:Instance"
TC_ENI_ATTACHMENT = "tencentcloud:Eni/attachment:Attachment"
AWS_INSTANCE_STATE = "aws:ec2transitgateway/instanceState:InstanceState"


@dataclass(frozen=True)
class Kind:
    """How one resource type becomes capacity records. Paths are relative to the resource; with `each`
    (one record per worker config), all but `tags` are relative to that element."""

    token: str
    instance_types: tuple[str, ...] = ("instanceType",)
    type_prefix: str = ""                       # removed before the shape lookup ("ml." on SageMaker)
    requirements: tuple[str, ...] = ()          # instanceRequirements objects (GPU asked by attributes)
    count: tuple[str, ...] = ()                 # machines declared: the first positive number (none: 1)
    runs: tuple[str, ...] = ()                  # machines that run: the first known number (none: count)
    count_unit: str = "machines"                # "vcpus": a positive number means machines run
    stopped: tuple[str, str] = ("", "")         # (path, value) that holds the machines stopped
    subnets: tuple[str, ...] = ()
    enis: tuple[str, ...] = ()                  # ids of network interfaces the machines attach
    zones: tuple[str, ...] = ()
    tags: tuple[str, ...] = ("tags", "tagsAll")  # maps, or lists of {key, value}; tagsAll has default tags
    charge: str = ""                            # Tencent charge type path (SPOTPAID: spot)
    market: str = "instance"                    # how the purchase option is read (stack.py `_MARKETS`)
    public: tuple[str, ...] = ()                # booleans: true hands out a public IPv4 address
    public_bandwidth: tuple[str, ...] = ()      # numbers: > 0 hands out a public address (Tencent)
    ipv6: tuple[str, ...] = ()                  # counts or lists of IPv6 addresses
    hpc: str = ""                               # Tencent HPC cluster id (HCC RDMA network)
    each: str = ""                              # one record per element of this list / object
    default_vpc: bool = False                   # no subnet at all launches it in the default VPC


_AWS_NIC = ("networkInterfaces[].networkInterfaceId",)

KINDS: dict[str, Kind] = {k.token: k for k in (
    Kind(AWS_INSTANCE, subnets=("subnetId", "secondaryNetworkInterfaces[].secondarySubnetId"), enis=_AWS_NIC + ("primaryNetworkInterface.networkInterfaceId",),
         zones=("availabilityZone",), public=("associatePublicIpAddress",),
         ipv6=("ipv6AddressCount", "ipv6Addresses[]"), default_vpc=True),
    Kind(AWS_SPOT_REQUEST, subnets=("subnetId", "secondaryNetworkInterfaces[].secondarySubnetId"), enis=_AWS_NIC, zones=("availabilityZone",),
         public=("associatePublicIpAddress",), ipv6=("ipv6AddressCount", "ipv6Addresses[]"), market="spot",
         default_vpc=True),
    Kind(AWS_ASG, instance_types=("mixedInstancesPolicy.launchTemplate.overrides[].instanceType",),
         requirements=("mixedInstancesPolicy.launchTemplate.overrides[].instanceRequirements",),
         count=("desiredCapacity", "minSize", "maxSize"), runs=("desiredCapacity", "minSize"),
         subnets=("vpcZoneIdentifiers[]",), zones=("availabilityZones[]",), tags=("tags[]",), market="asg",
         default_vpc=True),
    Kind(AWS_NODE_GROUP, instance_types=("instanceTypes[]",),
         count=("scalingConfig.desiredSize", "scalingConfig.minSize", "scalingConfig.maxSize"),
         runs=("scalingConfig.desiredSize", "scalingConfig.minSize"), subnets=("subnetIds[]",),
         market="node-group"),
    Kind(AWS_FLEET, instance_types=("launchTemplateConfigs[].overrides[].instanceType",),
         requirements=("launchTemplateConfigs[].overrides[].instanceRequirements",),
         count=("targetCapacitySpecification.totalTargetCapacity",),
         subnets=("launchTemplateConfigs[].overrides[].subnetId",),
         zones=("launchTemplateConfigs[].overrides[].availabilityZone",), market="fleet", default_vpc=True),
    Kind(AWS_SPOT_FLEET, instance_types=("launchTemplateConfigs[].overrides[].instanceType",
                                         "launchSpecifications[].instanceType"),
         requirements=("launchTemplateConfigs[].overrides[].instanceRequirements",),
         count=("targetCapacity",),
         subnets=("launchTemplateConfigs[].overrides[].subnetId", "launchSpecifications[].subnetId"),
         zones=("launchTemplateConfigs[].overrides[].availabilityZone", "launchSpecifications[].availabilityZone"),
         public=("launchSpecifications[].associatePublicIpAddress",), market="spot-fleet", default_vpc=True),
    Kind(AWS_BATCH, instance_types=("computeResources.instanceTypes[]",),
         count=("computeResources.desiredVcpus", "computeResources.minVcpus", "computeResources.maxVcpus"),
         runs=("computeResources.desiredVcpus", "computeResources.minVcpus"), count_unit="vcpus",
         subnets=("computeResources.subnets[]",), tags=("computeResources.tags", "tags", "tagsAll"),
         market="batch"),
    Kind(AWS_NOTEBOOK, type_prefix="ml.", subnets=("subnetId",), market="on-demand"),
    Kind(AWS_EMR, instance_types=("masterInstanceGroup.instanceType", "coreInstanceGroup.instanceType",
                                  "masterInstanceFleet.instanceTypeConfigs[].instanceType",
                                  "coreInstanceFleet.instanceTypeConfigs[].instanceType"),
         count=("coreInstanceGroup.instanceCount",),
         subnets=("ec2Attributes.subnetId", "ec2Attributes.subnetIds[]"), market="emr", default_vpc=True),
    Kind(AWSN_INSTANCE, subnets=("subnetId", "networkInterfaces[].subnetId"), enis=_AWS_NIC,
         zones=("availabilityZone",), tags=("tags[]",),
         public=("networkInterfaces[].associatePublicIpAddress",),
         ipv6=("ipv6AddressCount", "ipv6Addresses[]", "networkInterfaces[].ipv6AddressCount"), market="on-demand",
         default_vpc=True),
    Kind(TC_INSTANCE, subnets=("subnetId",), zones=("availabilityZone",), charge="instanceChargeType",
         market="tencent", public=("allocatePublicIp",), stopped=("runningFlag", "false"), hpc="hpcClusterId",
         ipv6=("ipv6AddressCount",), tags=("tags",)),
    Kind(TC_INSTANCE_SET, count=("instanceCount",), subnets=("subnetId",), zones=("availabilityZone",),
         tags=(), charge="instanceChargeType", market="tencent", public=("allocatePublicIp",)),
    Kind(TC_SCALING_GROUP, instance_types=(), count=("desiredCapacity", "minSize", "maxSize"),
         runs=("desiredCapacity", "minSize"), subnets=("subnetIds[]",), zones=("zones[]",), market="tencent",
         tags=("tags",)),
    Kind(TC_NODE_POOL, instance_types=("autoScalingConfig.instanceType", "autoScalingConfig.backupInstanceTypes[]"),
         count=("desiredCapacity", "minSize", "maxSize"), runs=("desiredCapacity", "minSize"),
         subnets=("subnetIds[]",), zones=("zones[]",), charge="autoScalingConfig.instanceChargeType",
         market="tencent", public=("autoScalingConfig.publicIpAssigned",), tags=("tags",)),
    Kind(TC_NATIVE_POOL, instance_types=("native.instanceTypes[]",), count=("native.replicas",),
         subnets=("native.subnetIds[]",), tags=("tags[].tags[]",), charge="native.instanceChargeType",
         market="tencent",
         public_bandwidth=("native.internetAccessible.maxBandwidthOut",)),
    Kind(TC_K8S_CLUSTER, each="workerConfigs[]", count=("count",), subnets=("subnetId",),
         zones=("availabilityZone",), tags=("tags",), charge="instanceChargeType", market="tencent",
         public=("publicIpAssigned",), hpc="hpcClusterId"),
    Kind(TC_SCALE_WORKER, each="workerConfig", count=("count",), subnets=("subnetId",),
         zones=("availabilityZone",), tags=("workerConfig.tags[]",), charge="instanceChargeType",
         market="tencent", public=("publicIpAssigned",), hpc="hpcClusterId"),
)}

CAPACITY_TYPES = tuple(KINDS)
"""Resources that run machines: GPU nodes and anything else that could share their subnet."""



# ---- everything else that names a subnet (placements.py, generated) ------------------------------------
# Reviewed by hand against the generated list: types that configure a subnet, or reserve or route for it,
# and place no workload or interface in it. Everything else in placements.py that is not capacity is a
# workload placement, judged by `dedicated-subnet`.
PLUMBING = frozenset({
    "aws:ec2/defaultNetworkAcl:DefaultNetworkAcl", "aws:ec2/networkAcl:NetworkAcl",
    "aws:ec2/networkAclAssociation:NetworkAclAssociation", "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/subnetCidrReservation:SubnetCidrReservation", "aws:ec2/flowLog:FlowLog",
    "aws:ec2/vpcBlockPublicAccessExclusion:VpcBlockPublicAccessExclusion", "aws:ec2clientvpn/route:Route",
    "aws:ec2/natGateway:NatGateway",
    # launch templates are read through the capacity that launches from them
    "aws:ec2/launchTemplate:LaunchTemplate",
    "tencentcloud:Route/tableAssociation:TableAssociation", "tencentcloud:Vpc/aclAttachment:AclAttachment",
    "tencentcloud:Vpc/ipv6SubnetCidrBlock:Ipv6SubnetCidrBlock", "tencentcloud:Reserve/ipAddress:IpAddress",
    "tencentcloud:Vpc/dhcpIp:DhcpIp", "tencentcloud:Vpc/netDetect:NetDetect",
    "tencentcloud:Cfw/edgeFirewallSwitch:EdgeFirewallSwitch", "tencentcloud:Cfw/natFirewallSwitch:NatFirewallSwitch",
    "tencentcloud:Nat/gateway:Gateway", "tencentcloud:Nat/gatewaySnat:GatewaySnat",
    "tencentcloud:Cvm/launchTemplate:LaunchTemplate", "tencentcloud:Cvm/launchTemplateVersion:LaunchTemplateVersion",
})

# What may share a cluster's subnet besides its GPU nodes, when tagged gpu-cluster:name=<cluster>: the
# file systems the nodes mount and the VPC endpoints they call (an EFS mount target by its file system's
# tags). Its one head node is capacity with gpu-cluster:role=head (`dedicated-subnet`).
CLUSTER_MEMBERS = frozenset({
    "aws:fsx/lustreFileSystem:LustreFileSystem", "aws:fsx/ontapFileSystem:OntapFileSystem",
    "aws:fsx/openZfsFileSystem:OpenZfsFileSystem", "aws:fsx/windowsFileSystem:WindowsFileSystem",
    "aws:fsx/fileCache:FileCache", "aws:efs/mountTarget:MountTarget",
    "aws:ec2/vpcEndpoint:VpcEndpoint", "tencentcloud:Cfs/fileSystem:FileSystem",
})
# (A Tencent VPC endpoint, tencentcloud:Vpc/endPoint, carries no tags in provider 0.2.3, so nothing can say
# it is a cluster's: it belongs in a vSwitch of its own.)
HEAD_ROLE = "head"

# What each rule reads from a capacity record: the `Kind` fields (docs/policies.md is generated from this
# and KINDS), and the record fields whose being unknown fails the rule in strict mode.
RULE_FIELDS: dict[str, tuple[str, ...]] = {
    "dedicated-subnet": ("subnets", "enis", "tags"),
    "no-spot-only-critical": ("instance_types", "requirements", "market", "charge", "count", "runs", "stopped",
                              "tags"),
    "single-zone": ("zones", "subnets", "hpc", "tags"),
    "placement-required": ("instance_types", "count", "hpc", "tags"),
    "rdma-enabled": ("instance_types", "count", "hpc", "tags"),
    "no-public-ip": ("public", "public_bandwidth", "ipv6", "subnets", "enis"),
    "storage-encrypted": ("instance_types",),
    "budget-alarm": ("instance_types", "requirements"),
}
STRICT_NEEDS: dict[str, tuple[str, ...]] = {
    "dedicated-subnet": ("subnet", "launch template"),
    "no-spot-only-critical": ("purchase option", "count", "instance type"),
    "single-zone": ("subnet",),
    "placement-required": ("launch template",),
    "rdma-enabled": ("launch template", "instance type"),
    "no-public-ip": ("subnet", "launch template"),
    "storage-encrypted": ("launch template",),
}
