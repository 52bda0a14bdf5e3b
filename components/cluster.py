"""Build the cluster of a validated spec on its cloud.

Each cloud package exposes the same `Cluster` component role (docs/architecture.md); this module only picks the
package, importing the other cloud's SDK never.
"""

from __future__ import annotations

import importlib
from typing import Optional

import pulumi

from components.spec import Cluster

_PACKAGES = {"aws": "components.aws.cluster", "tencentcloud": "components.tencentcloud.cluster"}


def build_cluster(cluster: Cluster, opts: Optional[pulumi.ResourceOptions] = None) -> pulumi.ComponentResource:
    """The cloud's cluster component for `cluster`; its `exports` are the stack outputs."""
    module = importlib.import_module(_PACKAGES[cluster.spec.cloud])
    return module.ClusterComponent(cluster.name, cluster, opts)
