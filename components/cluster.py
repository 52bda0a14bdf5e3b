"""Build the cluster of a validated spec on its cloud: the cloud's profile builds it (components/clouds.py),
importing that cloud's SDK and never the other's."""

from __future__ import annotations

from typing import Optional

import pulumi

from components.clouds import profile
from components.spec import Cluster


def build_cluster(cluster: Cluster, opts: Optional[pulumi.ResourceOptions] = None) -> pulumi.ComponentResource:
    """The cloud's cluster component for `cluster`; its `exports` are the stack outputs."""
    return profile(cluster.spec.cloud).build(cluster, opts)
