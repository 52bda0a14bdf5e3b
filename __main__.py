"""gpu-cluster: one validated stack file in, one complete GPU training environment out.

Reads the stack's `gpu-cluster:cluster` value and provider region, validates them (nothing is
created when they are wrong), builds the cluster on its cloud and exports its outputs.
"""

import pulumi

from components.catalog import CLOUDS
from components.cluster import build_cluster
from components.spec import SpecError, load_spec

try:
    cluster = load_spec(
        pulumi.Config("gpu-cluster").require_object("cluster"),
        {cloud: pulumi.Config(cloud).get("region") for cloud in CLOUDS},
    )
except SpecError as error:
    raise pulumi.RunError(str(error)) from None

for note in cluster.notes:
    pulumi.log.warn(note)

for key, value in build_cluster(cluster).exports.items():
    pulumi.export(key, value)
