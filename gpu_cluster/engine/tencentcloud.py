"""What Tencent Cloud computes and answers, for the offline mocks (see gpu_cluster/engine/__init__.py).

Ids follow Tencent's formats: a resource prefix and 8 lowercase alphanumerics (vpc-1a2b3c4d), a number
(CAM), a UUID (CLS), or what the provider builds from the resource's arguments (COS, SCF, attachments,
flow logs, route entries).
"""

from __future__ import annotations

import hashlib
from typing import Callable, Optional

import pulumi

_APP_ID = "1250000000"
_UIN = "100000000001"


def digits(seed: str, n: int) -> str:
    """`n` decimal digits (the first never 0) derived from `seed`."""
    return str(int(hashlib.sha256(seed.encode()).hexdigest(), 16))[:n]


NUMERIC_IDS: dict[str, int] = {
    # CAM ids are numbers: a role's id is its RoleId, a policy's strconv.Itoa(PolicyId)
    # (resource_tc_cam_role.go, resource_tc_cam_policy.go Create), and an attachment's policy_id must
    # parse as one (resource_tc_cam_role_policy_attachment.go: strconv.Atoi).
    "tencentcloud:Cam/role:Role": 19,
    "tencentcloud:Cam/policy:Policy": 9,
}
"""Types whose ids are decimal numbers, with their number of digits."""

def _joined(inputs: dict, *keys: str) -> Optional[str]:
    """The arguments joined with "#" (tccommon.FILED_SP), or None when one is missing."""
    values = [inputs.get(k) for k in keys]
    return "#".join(str(v) for v in values) if all(v not in (None, "") for v in values) else None


def _uuid(digest: str) -> str:
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


# Types whose id the provider builds from the resource's own arguments (its Create's d.SetId), as
# fn(engine inputs, digest) → id (digest: a stable hex hash standing in for what the API returns), or
# None when an argument it needs is missing. All v1.82.42; tccommon.FILED_SP is "#".
IDS_FROM_INPUTS: dict[str, Callable[[dict, str], Optional[str]]] = {
    # d.SetId(bucket): the bucket's name with its appid (resource_tc_cos_bucket.go Create)
    "tencentcloud:Cos/bucket:Bucket": lambda inputs, _: inputs.get("bucket"),
    # d.SetId(bucket + key) (resource_tc_cos_bucket_object.go Create)
    "tencentcloud:Cos/bucketObject:BucketObject": lambda inputs, _: (
        inputs["bucket"] + inputs["key"] if inputs.get("bucket") and inputs.get("key") else None),
    # d.SetId("<namespace>+<name>"), namespace defaulting to "default" (resource_tc_scf_function.go)
    "tencentcloud:Scf/function:Function": lambda inputs, _: (
        f"{inputs.get('namespace') or 'default'}+{inputs['name']}" if inputs.get("name") else None),
    # d.SetId(roleId + "#" + strconv.Itoa(policyId)) (resource_tc_cam_role_policy_attachment.go Create)
    "tencentcloud:Cam/rolePolicyAttachment:RolePolicyAttachment": lambda inputs, _: _joined(inputs, "roleId", "policyId"),
    # the disk's id (resource_tc_cbs_storage_attachment.go Create: d.SetId(storageId))
    "tencentcloud:Cbs/storageAttachment:StorageAttachment": lambda inputs, _: inputs.get("storageId"),
    # storageId#policyId (resource_tc_cbs_snapshot_policy_attachment.go Create)
    "tencentcloud:Cbs/snapshotPolicyAttachment:SnapshotPolicyAttachment": lambda inputs, _: _joined(
        inputs, "storageId", "snapshotPolicyId"),
    # autoSnapshotPolicyId#fileSystemIds (resource_tc_cfs_auto_snapshot_policy_attachment.go Create)
    "tencentcloud:Cfs/autoSnapshotPolicyAttachment:AutoSnapshotPolicyAttachment": lambda inputs, _: _joined(
        inputs, "autoSnapshotPolicyId", "fileSystemIds"),
    # ccnId#instanceType#instanceRegion#instanceId (resource_tc_ccn_attachment_v2.go Create)
    "tencentcloud:Ccn/attachmentV2:AttachmentV2": lambda inputs, _: _joined(
        inputs, "ccnId", "instanceType", "instanceRegion", "instanceId"),
    # flowLogId#vpcId, the flow log's id from CreateFlowLog (resource_tc_vpc_flow_log.go Create)
    "tencentcloud:Vpc/flowLog:FlowLog": lambda inputs, digest: (
        f"fl-{digest[:8]}#{inputs['vpcId']}" if inputs.get("vpcId") else None),
    # "<entry id>.<route table id>", the entry id a number (resource_tc_route_table_entry.go Create)
    "tencentcloud:Route/tableEntry:TableEntry": lambda inputs, digest: (
        f"{int(digest[:6], 16)}.{inputs['routeTableId']}" if inputs.get("routeTableId") else None),
    # CLS ids are UUIDs (website/docs/r/cls_logset.html.markdown, cls_topic.html.markdown: Import)
    "tencentcloud:Cls/logset:Logset": lambda _, digest: _uuid(digest),
    "tencentcloud:Cls/topic:Topic": lambda _, digest: _uuid(digest),
}

# Provider type token → id prefix of the resource's physical id.
ID_PREFIXES: dict[str, str] = {
    "tencentcloud:Vpc/instance:Instance": "vpc-",
    "tencentcloud:Subnet/instance:Instance": "subnet-",
    "tencentcloud:Security/group:Group": "sg-",
    "tencentcloud:Security/groupRuleSet:GroupRuleSet": "sg-",
    "tencentcloud:Eip/instance:Instance": "eip-",
    "tencentcloud:Nat/gateway:Gateway": "nat-",
    "tencentcloud:Route/table:Table": "rtb-",
    "tencentcloud:Cvm/hpcCluster:HpcCluster": "hpc-",
    "tencentcloud:Instance/instance:Instance": "ins-",
    "tencentcloud:Cbs/storage:Storage": "disk-",
    "tencentcloud:Cbs/snapshotPolicy:SnapshotPolicy": "asp-",
    "tencentcloud:Ccn/instance:Instance": "ccn-",
    "tencentcloud:Cfs/accessGroup:AccessGroup": "pgroup-",
    "tencentcloud:Cfs/accessRule:AccessRule": "rule-",
    "tencentcloud:Cfs/fileSystem:FileSystem": "cfs-",
    "tencentcloud:Cfs/autoSnapshotPolicy:AutoSnapshotPolicy": "asp-",
    "tencentcloud:Monitor/alarmNotice:AlarmNotice": "notice-",
    "tencentcloud:Monitor/alarmPolicy:AlarmPolicy": "policy-",
    "tencentcloud:Monitor/policyBindingObject:PolicyBindingObject": "policy-",
}


def _instance(name: str, inputs: dict, rid: str) -> dict:
    # A given private_ip is the instance's address (RunInstances VirtualPrivateCloud.PrivateIpAddresses).
    return {"privateIp": inputs.get("privateIp") or f"10.0.{int(digits(name, 3)) % 250}.{int(digits(rid, 3)) % 250 + 2}",
            "instanceStatus": "RUNNING", "cpu": 0, "memory": 0, "createTime": "2026-11-30T00:00:00Z"}


def _file_system(name: str, inputs: dict, rid: str) -> dict:
    # Turbo's mount IP sits in its CCN range (cidrBlock); the fs id is the mount root directory.
    cidr = inputs.get("cidrBlock") or "10.0.0.0/24"
    base = cidr.split("/")[0].rsplit(".", 1)[0]
    return {"mountIp": f"{base}.{int(digits(rid, 2)) % 200 + 10}", "fsId": digits(rid, 8),
            "createTime": "2026-11-30T00:00:00Z"}


def _region() -> str:
    # The provider's region setting; ap-guangzhou is its documented default (provider.go "region").
    return pulumi.Config("tencentcloud").get("region") or "ap-guangzhou"


def _bucket(name: str, inputs: dict, rid: str) -> dict:
    # "<id>.cos.<provider region>.myqcloud.com" (resource_tc_cos_bucket.go Read)
    return {"cosBucketUrl": f"{rid}.cos.{_region()}.myqcloud.com"}


def _vpc(name: str, inputs: dict, rid: str) -> dict:
    return {"defaultRouteTableId": f"rtb-{digits(rid, 8)}", "isDefault": False}


def _eip(name: str, inputs: dict, rid: str) -> dict:
    return {"publicIp": f"43.{int(digits(rid, 3)) % 250}.{int(digits(name, 3)) % 250}.10", "status": "UNBIND"}


# Provider type token → fn(name, inputs, id) → computed outputs.
COMPUTED: dict = {
    "tencentcloud:Vpc/instance:Instance": _vpc,
    "tencentcloud:Eip/instance:Instance": _eip,
    "tencentcloud:Instance/instance:Instance": _instance,
    "tencentcloud:Cfs/fileSystem:FileSystem": _file_system,
    "tencentcloud:Cos/bucket:Bucket": _bucket,
}


def _images(args: dict) -> dict:
    # The provider returns the images only in `images` (newest first); it never sets a top-level
    # image_id (data_source_tc_images.go).
    os_name = args.get("osName") or "TencentOS Server 3.1 (TK4)"
    image = {"imageId": "img-487zeit5", "imageName": os_name, "osName": os_name, "imageType": "PUBLIC_IMAGE",
             "architecture": "x86_64", "platform": os_name.split()[0], "imageState": "NORMAL", "imageSize": 20,
             "imageSource": "OFFICIAL", "imageCreator": "", "imageDescription": "",
             "createdTime": "2026-10-01T00:00:00Z", "supportCloudInit": True, "syncPercent": 100, "snapshots": []}
    return {"id": "images", "images": [image]}


def _user(args: dict) -> dict:
    return {"id": f"user-{_UIN}-{_APP_ID}-1", "appId": _APP_ID, "uin": _UIN, "ownerUin": _UIN, "name": "gpu-cluster-deployer"}


def _cam_users(args: dict) -> dict:
    """Every e-mail asked for belongs to one CAM sub-user (the provider filters ListUsers by e-mail)."""
    email = args.get("email") or "mlops@example.com"
    name = email.split("@", 1)[0]
    return {"id": f"users-{digits(email, 8)}", "userLists": [{
        "uid": int(digits(email + "uid", 8)), "uin": int("1000" + digits(email, 8)), "name": name, "userId": name,
        "email": email, "remark": "", "phoneNum": "", "countryCode": "86", "consoleLogin": 1}]}


def _cbs_config(zone: str, family: str, disk_type: str) -> dict:
    return {"available": True, "deviceClass": "CLOUD", "diskChargeType": "POSTPAID_BY_HOUR", "diskType": disk_type,
            "diskUsage": "SYSTEM_DISK", "extraPerformanceRanges": [], "instanceFamily": family, "maxDiskSize": 1024,
            "minDiskSize": 20, "stepSize": 1, "zone": zone}


def _instance_types(args: dict) -> dict:
    """The catalogued shapes of the family as sold in the zone (and the Slurm head node's CPU shape), each
    offering Enhanced SSD system disks."""
    from components import catalog
    from components.tencentcloud import head

    filters = {f.get("name"): f.get("values") or [] for f in args.get("filters") or []}
    zone = (filters.get("zone") or [args.get("availabilityZone") or "ap-guangzhou-3"])[0]
    families = filters.get("instance-family") or []
    cbs = bool(args.get("cbsFilter"))
    rows = [(s.type, s.family, s.vcpu, s.mem_gib, s.gpu_count) for s in catalog.shapes("tencentcloud").values()]
    rows.append((head.HEAD_INSTANCE_TYPE, head.HEAD_FAMILY, head.HEAD_VCPU, head.HEAD_MEM_GIB, 0))
    out = []
    for instance_type, family, vcpu, mem_gib, gpus in rows:
        if families and family not in families:
            continue
        out.append({"availabilityZone": zone, "instanceType": instance_type, "family": family,
                    "cpuCoreCount": vcpu, "memorySize": mem_gib, "gpuCoreCount": gpus,
                    "instanceChargeType": "POSTPAID_BY_HOUR", "status": "SELL",
                    "cbsConfigs": [_cbs_config(zone, family, "CLOUD_HSSD")] if cbs else []})
    return {"id": f"types-{digits(zone + ','.join(families), 8)}", "instanceTypes": out}


# The cvm_device alarm metrics the mock offers: CVM basics and the GPU metrics of the data API.
_ALARM_METRICS = ("CpuUsage", "MemUsage", "GpuUtil", "GpuMemUsage", "GpuTemp", "GpuPowUsage")


def _alarm_metrics(args: dict) -> dict:
    def metric(name: str) -> dict:
        return {"namespace": args.get("namespace"), "metricName": name, "description": name, "min": 0.0, "max": 100.0,
                "dimensions": ["InstanceId"], "unit": "%", "isAdvanced": 0, "isOpen": 1, "productId": 0,
                "metricConfigs": [{"operators": ["gt", "lt"], "periods": [60, 300, 3600], "continuePeriods": [1, 2, 5]}],
                "operators": [{"id": "gt", "name": ">"}, {"id": "lt", "name": "<"}], "periods": [60, 300, 3600]}
    return {"id": f"metrics-{args.get('namespace')}", "metrics": [metric(n) for n in _ALARM_METRICS]}


def _subnets(args: dict) -> dict:
    subnet_id = args.get("subnetId") or "subnet-00000000"
    return {"id": "subnets", "instanceLists": [{
        "subnetId": subnet_id, "vpcId": f"vpc-{digits(subnet_id, 8)}", "cidrBlock": "10.99.0.0/24",
        "availabilityZone": args.get("availabilityZone") or "", "name": "shared", "isDefault": False,
        "isMulticast": False, "routeTableId": f"rtb-{digits(subnet_id + 'rtb', 8)}", "availableIpCount": 250,
        "cdcId": "", "createTime": "2024-01-01 00:00:00", "tags": {}}]}


# Invoke token → fn(args) → result.
LOOKUPS: dict = {
    "tencentcloud:Images/getInstance:getInstance": _images,
    "tencentcloud:User/getInfo:getInfo": _user,
    "tencentcloud:Vpc/getSubnets:getSubnets": _subnets,
    "tencentcloud:Cam/getUsers:getUsers": _cam_users,
    "tencentcloud:Instance/getTypes:getTypes": _instance_types,
    "tencentcloud:Monitor/getAlarmMetric:getAlarmMetric": _alarm_metrics,
}
