"""Storage role on AWS (docs/architecture.md): FSx for Lustre PERSISTENT_2 in the node subnet (with an S3 data
repository association when asked), the private checkpoint bucket, and the per-node data volumes.

Data safety: the file system, the bucket and the data volumes are `protect=True`, and their logical
names carry only the cluster name (and the node index for volumes) — never tier, instance type, node
count or purchase — so changing those never replaces stored data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import pulumi
import pulumi_aws as aws

from components.aws.common import policy_output, tagged
from components.spec import Lustre

# Lustre network traffic: LNet on 988, plus the privileged ports the servers talk from (FSx for
# Lustre user guide, "File system access control with Amazon VPC":
# docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html).
LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))
DATA_VOLUME_TYPE = "gp3"


@dataclass(frozen=True)
class StorageArgs:
    zone: str
    """The cluster's zone: data volumes are created here; FSx follows its subnet."""
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    """The node subnet; the file system's single subnet (and so its zone)."""
    node_security_group_id: pulumi.Input[str]
    """Lustre ports are opened to this group."""
    tags: Mapping[str, str]
    lustre: Optional[Lustre] = None
    """Capacity, throughput and optional import path; None (default): no file system."""
    fsx_backup_retention_days: int = 0
    """Daily automatic FSx backups kept this many days (capped, 0 for a file system linked to S3:
    components/aws/notes.py `fsx_backup_days`)."""
    checkpoint_bucket: bool = True
    """Create the private, versioned, encrypted checkpoint bucket (default True)."""
    data_disk_gb: int = 0
    """Size of one persistent data volume per node, GB; 0 (default): none."""
    nodes: int = 1
    """How many data volumes (one per node)."""
    backup_tags: Mapping[str, str] = field(default_factory=dict)
    """Extra tags on each data volume that put it under the snapshot schedule (components/aws/backup.py)."""
    head_data_gb: int = 0
    """Size of the Slurm head node's state volume, GB (components/headnode.py HEAD_DATA_GB); 0: no head node."""


DRA_CREATE_TIMEOUT = "2h"
"""How long `pulumi up` waits for the data repository association (and its metadata import) to be made."""


class Storage(pulumi.ComponentResource):
    """The cluster's file system, checkpoint bucket and data volumes."""

    fsx_id: Optional[pulumi.Output[str]]
    fsx_dns_name: Optional[pulumi.Output[str]]
    fsx_mount_name: Optional[pulumi.Output[str]]
    bucket_name: Optional[pulumi.Output[str]]
    bucket_arn: Optional[pulumi.Output[str]]
    data_volume_ids: list[pulumi.Output[str]]
    head_volume_id: Optional[pulumi.Output[str]]

    def __init__(self, name: str, args: StorageArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        keep = pulumi.ResourceOptions(parent=self, protect=True)
        self.fsx_id = self.fsx_dns_name = self.fsx_mount_name = None
        self.bucket_name = self.bucket_arn = None

        if args.lustre is not None:
            self._lustre(name, args, child, keep)
        if args.checkpoint_bucket:
            self._bucket(name, args, child, keep)

        self.data_volume_ids = []
        for i in range(args.nodes if args.data_disk_gb > 0 else 0):
            vol_name = f"{name}-data-{i}"
            volume = aws.ebs.Volume(
                vol_name, availability_zone=args.zone, size=args.data_disk_gb, type=DATA_VOLUME_TYPE,
                encrypted=True, final_snapshot=True,
                tags=tagged(args.tags, vol_name, **args.backup_tags), opts=keep)
            self.data_volume_ids.append(volume.id)
        self.head_volume_id = None
        if args.head_data_gb > 0:
            # The head node's slurmctld state: kept, encrypted and snapshotted like the nodes' data volumes.
            vol_name = f"{name}-head-data"
            self.head_volume_id = aws.ebs.Volume(
                vol_name, availability_zone=args.zone, size=args.head_data_gb, type=DATA_VOLUME_TYPE,
                encrypted=True, final_snapshot=True,
                tags=tagged(args.tags, vol_name, **args.backup_tags), opts=keep).id

        self.register_outputs({
            "fsx_id": self.fsx_id,
            "fsx_dns_name": self.fsx_dns_name,
            "fsx_mount_name": self.fsx_mount_name,
            "bucket_name": self.bucket_name,
            "bucket_arn": self.bucket_arn,
            "data_volume_ids": self.data_volume_ids,
            "head_volume_id": self.head_volume_id,
        })

    @staticmethod
    def _lustre_security_group(name: str, args: StorageArgs,
                               child: pulumi.ResourceOptions) -> tuple[aws.ec2.SecurityGroup, list[pulumi.Resource]]:
        """The file system's security group and every LNet rule it needs, on its group and on the nodes'."""
        sg_name = f"{name}-lustre"
        sg = aws.ec2.SecurityGroup(
            sg_name, vpc_id=args.vpc_id,
            description=f"FSx for Lustre of {name}: LNet ports from the GPU nodes and the file servers",
            tags=tagged(args.tags, sg_name), opts=child)
        rules: list[pulumi.Resource] = []
        peers = {"self": sg.id, "nodes": args.node_security_group_id}
        for peer, peer_id in peers.items():
            for low, high in LUSTRE_PORTS:
                ports = f"{low}" if low == high else f"{low}-{high}"
                for direction, rule_type in (("in", aws.vpc.SecurityGroupIngressRule),
                                             ("out", aws.vpc.SecurityGroupEgressRule)):
                    rule = f"{name}-lustre-{direction}-{peer}-{ports}"
                    rules.append(rule_type(
                        rule, security_group_id=sg.id, referenced_security_group_id=peer_id,
                        ip_protocol="tcp", from_port=low, to_port=high,
                        description=f"Lustre {ports} {'from' if direction == 'in' else 'to'} {peer}",
                        tags=tagged(args.tags, rule), opts=child))
        # The client side too: AWS lists inbound 988 and 1018-1023 from the file system's group on
        # the Lustre clients' security group (LustreGuide "limit-access-security-groups", client
        # rules), since the servers open connections back to the clients. Scoped to the FSx group.
        for low, high in LUSTRE_PORTS:
            ports = f"{low}" if low == high else f"{low}-{high}"
            rule = f"{name}-lustre-client-in-{ports}"
            rules.append(aws.vpc.SecurityGroupIngressRule(
                rule, security_group_id=args.node_security_group_id, referenced_security_group_id=sg.id,
                ip_protocol="tcp", from_port=low, to_port=high, description=f"Lustre {ports} from the file system",
                tags=tagged(args.tags, rule), opts=child))
        return sg, rules

    def _lustre(self, name: str, args: StorageArgs, child: pulumi.ResourceOptions,
                keep: pulumi.ResourceOptions) -> None:
        lustre = args.lustre
        sg, rules = self._lustre_security_group(name, args, child)

        fs_name = f"{name}-lustre"
        # Encryption at rest is always on for FSx for Lustre persistent file systems (AWS-managed key
        # unless kms_key_id is given); in transit it is encrypted between Nitro instances.
        fs = aws.fsx.LustreFileSystem(
            fs_name,
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=lustre.capacity_gib,
            per_unit_storage_throughput=lustre.throughput_per_tib,
            subnet_ids=args.subnet_id,  # pulumi-aws 7: one subnet id, a string (gpu_cluster/contracts/aws.yaml)
            security_group_ids=[sg.id],
            file_system_type_version="2.15",
            data_compression_type="LZ4",
            # "0:0" maps root to root: root squash off (FSx API LustreRootSquashConfiguration.RootSquash).
            root_squash_configuration=aws.fsx.LustreFileSystemRootSquashConfigurationArgs(root_squash="0:0"),
            automatic_backup_retention_days=args.fsx_backup_retention_days,
            daily_automatic_backup_start_time="03:00" if args.fsx_backup_retention_days else None,
            copy_tags_to_backups=True,
            tags=tagged(args.tags, fs_name),
            # After every rule it needs: CreateFileSystem checks the groups and fails with
            # InvalidNetworkSettings ("do not permit Lustre LNET network traffic on port 988") when a
            # rule lands after it (aws/aws-parallelcluster issue 6181, fixed by the same dependency).
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(depends_on=rules)),
        )
        self.fsx_id, self.fsx_dns_name, self.fsx_mount_name = fs.id, fs.dns_name, fs.mount_name

        if lustre.import_path:
            # PERSISTENT_2 links S3 through data repository associations, not import_path (FSx for
            # Lustre user guide, "Linking your file system to an Amazon S3 bucket"). The repository
            # appears under /lustre/datasets.
            repo = lustre.import_path if lustre.import_path.endswith("/") else lustre.import_path + "/"
            aws.fsx.DataRepositoryAssociation(
                f"{name}-lustre-s3", file_system_id=fs.id, file_system_path="/datasets",
                data_repository_path=repo, batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                        events=["NEW", "CHANGED", "DELETED"])),
                tags=tagged(args.tags, f"{name}-lustre-s3"),
                # The provider waits 10 minutes for the association by default (terraform-provider-aws
                # website/docs/r/fsx_data_repository_association.html.markdown, Timeouts: create 10m), and
                # batch_import_meta_data_on_create imports every object's metadata first, which grows with
                # the bucket (FSx for Lustre user guide, "Importing files from your data repository"); a
                # create that outlasts the wait fails `pulumi up` while FSx goes on.
                opts=pulumi.ResourceOptions(parent=self, custom_timeouts=pulumi.CustomTimeouts(create=DRA_CREATE_TIMEOUT)))

    def _bucket(self, name: str, args: StorageArgs, child: pulumi.ResourceOptions,
                keep: pulumi.ResourceOptions) -> None:
        """Private, versioned, encrypted (CKV_AWS_19/21, CKV2_AWS_6) with lifecycle rules (CKV2_AWS_61)."""
        bucket_name = f"{name}-checkpoints"
        # No physical name: Pulumi auto-names it from the logical name (globally unique suffix).
        bucket = aws.s3.Bucket(bucket_name, force_destroy=False, tags=tagged(args.tags, bucket_name), opts=keep)
        self.bucket_name, self.bucket_arn = bucket.bucket, bucket.arn

        aws.s3.BucketPublicAccessBlock(
            f"{bucket_name}-public-access", bucket=bucket.id, block_public_acls=True, block_public_policy=True,
            ignore_public_acls=True, restrict_public_buckets=True, opts=child)
        aws.s3.BucketOwnershipControls(
            f"{bucket_name}-ownership", bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"), opts=child)
        aws.s3.BucketVersioning(
            f"{bucket_name}-versioning", bucket=bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{bucket_name}-encryption", bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}],
            opts=child)
        aws.s3.BucketLifecycleConfiguration(
            f"{bucket_name}-lifecycle", bucket=bucket.id,
            rules=[
                {"id": "abort-incomplete-uploads", "status": "Enabled", "filter": {"prefix": ""},
                 "abort_incomplete_multipart_upload": {"days_after_initiation": 7}},
                {"id": "expire-noncurrent-versions", "status": "Enabled", "filter": {"prefix": ""},
                 "noncurrent_version_expiration": {"noncurrent_days": 30}},
            ],
            opts=child)
        aws.s3.BucketPolicy(
            f"{bucket_name}-tls-only", bucket=bucket.id,
            policy=policy_output([{
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket.arn, pulumi.Output.concat(bucket.arn, "/*")],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }]),
            opts=child)
