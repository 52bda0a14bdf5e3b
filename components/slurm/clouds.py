"""Everything the Slurm boot scripts do differently per cloud, as data.

Command lines are token tuples (components.slurm.shell): `$NAME` tokens are variables the
generic script defines, everything else is a literal word. The generic scripts
(components.slurm.scripts) never branch on the cloud; they call the commands chosen here.

Variables the generic scripts provide to these commands:
  REGION, SECRET_ID, SECRET_VERSION      the secret store (version: Tencent only)
  SECRET_VALUE_INPUT                     file://<0600 file holding the base64 munge key>
  SECRET_JSON_INPUT                      file://<0600 JSON {SecretName, VersionId, SecretString}>
  METRIC_NAMESPACE, METRIC_NAME, METRIC_VALUE, METRIC_DIMENSIONS, METRIC_JSON, INSTANCE_ID
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.catalog import Cloud
from components.spec import NODE_TAG

TCCLI = "/opt/gpu-cluster/tccli/bin/tccli"
"""Tencent's CLI in its own virtualenv (pip refuses system-wide installs on Ubuntu 24.04, PEP 668)."""
TCCLI_VERSION, TCCLI_SDK_VERSION = "3.1.189.1", "3.1.189"
"""The tccli release the boot installs (PyPI tccli 3.1.189.1, whose cvm action models and output formats the power
agent's calls were read from) and the Tencent Cloud SDK it requires (tencentcloud-sdk-python>=3.1.189)."""

# IMDSv2 (a session token first) for AWS; Tencent's metadata service takes plain GETs. Both print
# the item and fail (curl -f) on HTTP 404, which is how "no spot notice yet" is told apart.
# AWS: docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html (IMDSv2);
# Tencent: intl.cloud.tencent.com/document/product/213/4934.
_AWS_METADATA = r'''metadata_get() {
  local token
  token=$(curl -fsS -m 5 -X PUT "http://169.254.169.254/latest/api/token" \
    -H "X-aws-ec2-metadata-token-ttl-seconds: 300") || return 1
  curl -fsS -m 5 -H "X-aws-ec2-metadata-token: ${token}" "http://169.254.169.254/latest/meta-data/$1"
}'''
_TENCENT_METADATA = r'''metadata_get() {
  curl -fsS -m 5 "http://metadata.tencentyun.com/latest/meta-data/$1"
}'''


@dataclass(frozen=True)
class CloudOps:
    cloud: Cloud
    metadata_function: str
    """Bash function `metadata_get <path>`: prints an instance-metadata item, fails on 404."""
    node_index_path: str | None
    """Metadata path holding the node's index, when every node shares one user data (AWS launch
    template: the `gpu-cluster:node` tag, readable once instance_metadata_tags is enabled —
    EC2 User Guide "Work with instance tags in instance metadata"). None: the index is written
    into each node's own user data (Tencent creates one instance resource per node)."""
    spot_notice_path: str
    """Metadata item present (HTTP 200) only once the spot instance is being reclaimed.
    AWS: spot/instance-action ("If Amazon EC2 is not preparing to stop or terminate the instance
    ... you receive an HTTP 404", EC2 User Guide spot-instance-termination-notices);
    Tencent: spot/termination-time ("If the error code 404 is returned, the instance is not a spot
    instance or it's not terminated", intl.cloud.tencent.com/document/product/213/32487)."""
    secret_get: tuple[str, ...]
    secret_extract: tuple[str, ...]
    """Filter turning secret_get's stdout into the stored string."""
    secret_missing: str
    """Text in secret_get's error output that means "the secret has no value yet" (and only that:
    any other failure is an error, never a reason to make a new key)."""
    secret_put: tuple[str, ...]
    metric_put: tuple[str, ...]
    metadata_ipv4: str
    """The metadata service's IPv4 address, which the metadata guard (scripts.metadata_guard_script)
    closes to every user but root: it hands out the instance role's credentials, and with them the
    munge key."""
    job_credentials: tuple[str, ...] | None = None
    """Prints temporary credentials of the jobs' own role (JOB_ROLE) as JSON with AccessKeyId,
    SecretAccessKey, SessionToken and Expiration; None: this cloud gives jobs no role of their own
    (they reach nothing in the cloud that the stack grants)."""
    instance_lookup: tuple[str, ...] | None = None
    """Prints one line per GPU node instance of the cluster (CLUSTER) that is not terminated: its index (the
    gpu-cluster:node tag), its instance id, its state and when it started (AWS LaunchTime, the last start; Tencent
    CreatedTime), separated by white space. None: Slurm does not start or stop this
    cloud's nodes (no power saving)."""
    instance_start: tuple[str, ...] | None = None
    """Starts the instances in the array INSTANCE_IDS (the same ids as a JSON array: INSTANCE_IDS_JSON)."""
    instance_stop: tuple[str, ...] | None = None
    """Stops the instances in the array INSTANCE_IDS (INSTANCE_IDS_JSON)."""
    cluster_filter: str = ""
    """instance_lookup's filter (CLUSTER_FILTER), a template of {tag} (the cluster-name tag's key) and {cluster}."""
    head_packages: tuple[str, ...] = ()
    node_packages: tuple[str, ...] = ()
    cli_setup: tuple[tuple[str, ...], ...] = ()
    """Commands that install the cloud CLI, run before anything needs it (idempotent)."""
    unconfirmed: tuple[str, ...] = field(default=())


AWS = CloudOps(
    cloud="aws",
    metadata_function=_AWS_METADATA,
    node_index_path=f"tags/instance/{NODE_TAG}",
    spot_notice_path="spot/instance-action",
    # Secrets Manager: the munge key is stored base64 in SecretString, like ParallelCluster's
    # update_munge_key.sh (aws/aws-parallelcluster-cookbook @ f75d84c3). A secret created without a
    # value answers get-secret-value with ResourceNotFoundException.
    secret_get=("aws", "secretsmanager", "get-secret-value", "--region", "$REGION",
                "--secret-id", "$SECRET_ID", "--query", "SecretString", "--output", "text"),
    secret_extract=("cat",),
    secret_missing="ResourceNotFoundException",
    # file:// keeps the key off the command line (/proc/<pid>/cmdline is world-readable).
    secret_put=("aws", "secretsmanager", "put-secret-value", "--region", "$REGION",
                "--secret-id", "$SECRET_ID", "--secret-string", "$SECRET_VALUE_INPUT"),
    # CloudWatch custom metric; InstanceId as a dimension so an alarm can act on the instance.
    metric_put=("aws", "cloudwatch", "put-metric-data", "--region", "$REGION",
                "--namespace", "$METRIC_NAMESPACE", "--metric-name", "$METRIC_NAME",
                "--unit", "Count", "--value", "$METRIC_VALUE", "--dimensions", "$METRIC_DIMENSIONS"),
    # The IMDS IPv4 address (EC2 user guide, "Access instance metadata for an EC2 instance":
    # 169.254.169.254). The IPv6 endpoint (fd00:ec2::254) answers only when http_protocol_ipv6 is
    # enabled, which no instance here sets (the provider's default is disabled).
    metadata_ipv4="169.254.169.254",
    # Jobs reach the checkpoint bucket through a role of their own, assumed by root with the node's
    # role (STS AssumeRole; a role assumed with an instance role's credentials is role chaining, at
    # most 1 hour: IAM user guide, "Methods to assume a role"). --query Credentials prints
    # AccessKeyId, SecretAccessKey, SessionToken and Expiration (STS API reference, AssumeRole).
    job_credentials=("aws", "sts", "assume-role", "--region", "$REGION", "--role-arn", "$JOB_ROLE",
                     "--role-session-name", "$SESSION_NAME", "--duration-seconds", "$DURATION_S",
                     "--query", "Credentials", "--output", "json"),
    # Slurm power saving on the head node (components/slurm/power.py). DescribeInstances filters tag:<key>,
    # tag-key and instance-state-name (pending | running | shutting-down | terminated | stopping | stopped);
    # StartInstances / StopInstances take the ids (EC2 API reference). A terminated instance is left out: it
    # cannot be started, and `pulumi up` creates the node again.
    cluster_filter="Name=tag:{tag},Values={cluster}",
    instance_lookup=("aws", "ec2", "describe-instances", "--region", "$REGION",
                     "--filters", "$CLUSTER_FILTER", f"Name=tag-key,Values={NODE_TAG}",
                     "Name=instance-state-name,Values=pending,running,stopping,stopped",
                     "--query",
                     f"Reservations[].Instances[].[Tags[?Key=='{NODE_TAG}']|[0].Value,InstanceId,State.Name,LaunchTime]",
                     "--output", "text"),
    instance_start=("aws", "ec2", "start-instances", "--region", "$REGION", "--instance-ids", "$INSTANCE_IDS[@]",
                    "--output", "text"),
    instance_stop=("aws", "ec2", "stop-instances", "--region", "$REGION", "--instance-ids", "$INSTANCE_IDS[@]",
                   "--output", "text"),
    # Ubuntu 24.04 has no awscli package; where the image carries no `aws`, the AWS CLI v2 snap AWS
    # documents ("sudo snap install aws-cli --classic": AWS CLI user guide, "Installing or updating to
    # the latest version of the AWS CLI", Snap package) — Ubuntu server images ship snapd. snapd refuses
    # installs until it has seeded the image's snaps ("too early for operation, device not yet seeded"),
    # so the install waits for that first, as Canonical's own tools do (craft-providers, cloud-init's
    # wait_for_snap_seeded: `snap wait system seed.loaded`).
    head_packages=(),
    node_packages=(),
    cli_setup=(("bash", "-c", "command -v aws > /dev/null 2>&1 || "
                "{ snap wait system seed.loaded && snap install aws-cli --classic; }"),),
)

TC_GONE_STATES = ("SHUTDOWN", "TERMINATING", "LAUNCH_FAILED")
"""Tencent instance states that cannot start again (cloud.tencent.com/document/api/213/15753#InstanceStatus:
isolated, being terminated, failed to launch)."""

TENCENTCLOUD = CloudOps(
    cloud="tencentcloud",
    metadata_function=_TENCENT_METADATA,
    node_index_path=None,
    spot_notice_path="spot/termination-time",
    # SSM GetSecretValue needs SecretName and VersionId (API 2019-09-23,
    # tencentcloud.com/document/product/1078/38649); credentials from the instance's CAM role
    # (`--use-cvm-role`, TCCLI credential docs cloud.tencent.com/document/product/440/96291).
    secret_get=(TCCLI, "ssm", "GetSecretValue", "--region", "$REGION", "--use-cvm-role",
                "--SecretName", "$SECRET_ID", "--VersionId", "$SECRET_VERSION"),
    secret_extract=("python3", "-c", "import json,sys; print(json.load(sys.stdin)['SecretString'])"),
    secret_missing="ResourceNotFound",
    # PutSecretValue adds a version (SecretName, VersionId, SecretString; product/1078/38645). The
    # request comes from a 0600 JSON file so the key never sits on a command line.
    secret_put=(TCCLI, "ssm", "PutSecretValue", "--region", "$REGION", "--use-cvm-role",
                "--cli-input-json", "$SECRET_JSON_INPUT"),
    # Cloud Monitor PutMonitorData (API 2018-07-24): Tencent marks it "will be disused soon" and its
    # console feature deactivated (tencentcloud.com/document/api/248/35974): unconfirmed that the
    # metric can still be alarmed on.
    metric_put=(TCCLI, "monitor", "PutMonitorData", "--region", "$REGION", "--use-cvm-role",
                "--Metrics", "$METRIC_JSON", "--AnnounceInstance", "$INSTANCE_ID"),
    # metadata.tencentyun.com's address, as Tencent's own clients call it (DataDog/datadog-agent
    # pkg/util/cloudproviders/tencent/tencent.go: metadataURL "http://169.254.0.23"); the instance role's
    # keys are served there without a token (cam/security-credentials/<role>, Tencent CVM docs,
    # "Querying Instance Metadata", intl.cloud.tencent.com/document/product/213/4934). The GPU node's
    # health check proves it closed by the host name (node-health), so a moved address drains the node.
    metadata_ipv4="169.254.0.23",
    # Slurm power saving on the head node (components/slurm/power.py), with the CVM API 2017-03-12 (the action
    # models of tccli 3.1.189.1, tccli/services/cvm/v20170312/api.json): DescribeInstances filters "tag:<key>" and
    # "tag-key", at most 100 a page (nodes ≤ 64), and at most 5 values a filter ("Filter.Values的上限为5"), so the
    # instances that can no longer start (TC_GONE_STATES) are left out by tccli's `--filter`, a JMESPath expression
    # on the answer; `--output text` prints one tab-separated line per instance (tccli format_output.py).
    # StopInstances with StoppedMode STOP_CHARGING (power.stopped_mode; KEEP_CHARGING for prepaid nodes), the "no
    # charges when shut down" mode of pay-as-you-go instances (CVM documentation 213/19918: a node with local NVMe
    # keeps charging, which the spec refuses to stop: profile.stop_problems); StopType SOFT_FIRST shuts down
    # cleanly, then forces.
    # StartInstances and StopInstances take InstanceIds as a JSON array.
    cluster_filter=('[{{"Name":"tag:{tag}","Values":["{cluster}"]}},{{"Name":"tag-key","Values":["' + NODE_TAG + '"]}}]'),
    instance_lookup=(TCCLI, "cvm", "DescribeInstances", "--region", "$REGION", "--use-cvm-role",
                     "--Filters", "$CLUSTER_FILTER", "--Limit", "100",
                     "--filter", "InstanceSet[?" + " && ".join(f"InstanceState!='{s}'" for s in TC_GONE_STATES)
                     + f"].[Tags[?Key=='{NODE_TAG}']|[0].Value,InstanceId,InstanceState,CreatedTime]",
                     "--output", "text"),
    instance_start=(TCCLI, "cvm", "StartInstances", "--region", "$REGION", "--use-cvm-role",
                    "--InstanceIds", "$INSTANCE_IDS_JSON"),
    instance_stop=(TCCLI, "cvm", "StopInstances", "--region", "$REGION", "--use-cvm-role",
                   "--InstanceIds", "$INSTANCE_IDS_JSON", "--StopType", "SOFT_FIRST", "--StoppedMode", "$STOPPED_MODE"),
    head_packages=("python3-venv",),
    node_packages=("python3-venv",),
    # tccli pinned, with the SDK it requires (its metadata: tencentcloud-sdk-python>=3.1.189): the release whose
    # --filter / --output text the power agent's lookup was checked against, not whatever PyPI has that day.
    cli_setup=(
        ("bash", "-c", "test -x /opt/gpu-cluster/tccli/bin/tccli || "
                       "{ python3 -m venv /opt/gpu-cluster/tccli && /opt/gpu-cluster/tccli/bin/pip install --quiet "
                       f"tccli=={TCCLI_VERSION} tencentcloud-sdk-python=={TCCLI_SDK_VERSION}; }}"),
    ),
    unconfirmed=("secret_missing error code", "--cli-input-json on PutSecretValue", "metric_put (deprecated API)"),
)

CLOUD_OPS: dict[str, CloudOps] = {"aws": AWS, "tencentcloud": TENCENTCLOUD}


def ops(cloud: Cloud) -> CloudOps:
    try:
        return CLOUD_OPS[cloud]
    except KeyError:
        raise ValueError(f"no Slurm boot commands for cloud {cloud!r}; expected one of {sorted(CLOUD_OPS)}") from None
