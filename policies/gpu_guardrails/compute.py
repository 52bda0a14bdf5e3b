"""Compute guardrails: on-demand capacity for critical clusters, packed placement, full RDMA, IMDSv2."""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from .props import UNKNOWN, as_int, as_str, get, items, known, short
from .shapes import efa_interfaces, is_gpu_type, is_tencent_hcc
from .stack import (AWS_ASG, AWS_LAUNCH_TEMPLATE, AWS_PLACEMENT_GROUP, TC_HPC_CLUSTER, Node, Ref, StackView,
                    config_list, config_value)


# ---- no-spot-only-critical -------------------------------------------------------------------------

def _no_spot_only_critical(args: Any, report_violation: Any) -> None:
    view = StackView(args.resources)
    critical = {v for v in config_list(args, "criticalValues") if isinstance(v, str)} or {"critical"}
    minimum = as_int(config_value(args, "minOnDemandNodes", 1)) or 1
    for cluster, nodes in view.clusters().items():
        if not any(n.criticality in critical for n in nodes):
            continue
        if any(n.spot is None for n in nodes):
            continue  # a purchase option is unknown (preview): judge at the update
        on_demand = sum(n.on_demand for n in nodes if n.spot is False)
        if on_demand < minimum:
            machines = sum(n.count for n in nodes)
            report_violation(
                f"Cluster '{cluster or '(untagged)'}' is critical but {on_demand} of its {machines} GPU nodes are "
                f"on-demand (the rest are spot and can be reclaimed at any time); run at least {minimum} "
                f"on-demand (purchase: mixed or on_demand), starting with '{short(nodes[0].urn)}'.",
                nodes[0].urn)


no_spot_only_critical = StackValidationPolicy(
    name="no-spot-only-critical",
    description="A cluster tagged critical keeps at least one on-demand GPU node instead of running on spot alone.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_no_spot_only_critical,
    config_schema=PolicyConfigSchema(properties={
        "criticalValues": {
            "type": "array", "items": {"type": "string"}, "default": ["critical"],
            "description": "Values of the gpu-cluster:criticality tag that mark a critical cluster.",
        },
        "minOnDemandNodes": {
            "type": "integer", "minimum": 1, "default": 1,
            "description": "On-demand GPU machines a critical cluster must keep.",
        },
    }),
    remediation_steps="Set purchase: mixed (the first node on-demand) or on_demand; for an autoscaling group "
                      "raise onDemandBaseCapacity to at least 1.",
)


# ---- placement-required ------------------------------------------------------------------------------

def _placement_ref(view: StackView, node: Node) -> Ref:
    res = node.resource
    for key in ("placementGroup", "placementGroupId"):
        if get(res.props, key) is not None:
            return view.ref(res, key, (AWS_PLACEMENT_GROUP,), keys=("name", "id", "placementGroupId", "arn"))
    lt = node.launch_template.resource
    if lt is not None:
        for key in ("placement.groupName", "placement.groupId"):
            if get(lt.props, key) is not None:
                return view.ref(lt, "placement", (AWS_PLACEMENT_GROUP,), value=get(lt.props, key),
                                keys=("name", "id", "placementGroupId", "arn"))
    return Ref()


def _placement_required(args: Any, report_violation: Any) -> None:
    view = StackView(args.resources)
    min_nodes = as_int(config_value(args, "minNodes", 2)) or 2
    tiers = {v for v in config_list(args, "alwaysForTiers") if isinstance(v, str)}
    for cluster, nodes in view.clusters().items():
        total = sum(n.count for n in nodes)
        if total < min_nodes and not any(n.tier in tiers for n in nodes):
            continue
        why = f"{total} nodes" if total >= min_nodes else f"tier {nodes[0].tier}"
        label = cluster or "(untagged)"
        for n in nodes:
            name = short(n.urn)
            if n.cloud == "aws":
                ref = _placement_ref(view, n)
                if not ref.present:
                    report_violation(
                        f"GPU node '{name}' of cluster '{label}' ({why}) has no placement group; put every node in "
                        f"one placement group with strategy 'cluster' so NCCL traffic stays on one network spine.",
                        n.urn)
                elif ref.resource is not None:
                    strategy = get(ref.resource.props, "strategy")
                    if known(strategy) and strategy != "cluster":
                        report_violation(
                            f"GPU node '{name}' of cluster '{label}' is in placement group "
                            f"'{short(ref.resource.urn)}' with strategy '{strategy}'; use strategy 'cluster'.",
                            n.urn)
            elif n.cloud == "tencentcloud" and is_tencent_hcc(n.instance_type):
                if get(n.resource.props, "hpcClusterId") is None:
                    report_violation(
                        f"GPU node '{name}' of cluster '{label}' ({why}) is an HCC shape ({n.instance_type}) "
                        f"outside any HPC cluster, so it has no RDMA network; create a tencentcloud.cvm.HpcCluster "
                        f"in the cluster's zone and set hpc_cluster_id on every node.", n.urn)


placement_required = StackValidationPolicy(
    name="placement-required",
    description="Multi-node or large GPU clusters are packed together: an AWS cluster placement group, or a "
                "Tencent HPC cluster for HCC (RDMA) shapes.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_placement_required,
    config_schema=PolicyConfigSchema(properties={
        "minNodes": {
            "type": "integer", "minimum": 1, "default": 2,
            "description": "From this many GPU machines on, a cluster must be packed.",
        },
        "alwaysForTiers": {
            "type": "array", "items": {"type": "string"}, "default": ["large"],
            "description": "gpu-cluster:tier values that need packing even with a single node.",
        },
    }),
    remediation_steps="AWS: create an aws.ec2.PlacementGroup(strategy='cluster') and reference it from every "
                      "node or the launch template. Tencent: create a cvm.HpcCluster and set hpc_cluster_id.",
)


# ---- rdma-enabled --------------------------------------------------------------------------------------

def _efa_cards(lt: Any) -> int:
    cards = set()
    for nic in items(get(lt.props, "networkInterfaces")):
        kind = as_str(get(nic, "interfaceType"))
        if kind in ("efa", "efa-only"):
            cards.add(as_int(get(nic, "networkCardIndex")) or 0)
    return len(cards)


def _rdma_enabled(args: Any, report_violation: Any) -> None:
    view = StackView(args.resources)
    min_nodes = as_int(config_value(args, "minNodes", 2)) or 2
    overrides_raw = get(args.get_config(), "efaInterfaces")
    overrides = {k: get(overrides_raw, (k,)) for k in overrides_raw} if hasattr(overrides_raw, "keys") else {}
    reported: set[str] = set()
    for cluster, nodes in view.clusters().items():
        if sum(n.count for n in nodes) < min_nodes:
            continue
        label = cluster or "(untagged)"
        hpc_home = None
        for n in nodes:
            if n.cloud == "aws":
                need = efa_interfaces(n.instance_type, overrides)
                if need == 0:
                    continue
                lt = n.launch_template.resource
                if lt is None and n.launch_template.present and n.launch_template.outside is None:
                    continue  # unknown template during preview
                if lt is not None and get(lt.props, "networkInterfaces") is UNKNOWN:
                    continue
                have = _efa_cards(lt) if lt is not None else 0
                target = lt.urn if lt is not None else n.urn
                if have < need and target not in reported:
                    reported.add(target)
                    where = f"launch template '{short(lt.urn)}'" if lt is not None else f"node '{short(n.urn)}'"
                    report_violation(
                        f"{n.instance_type} has {need} EFA interfaces but {where} of cluster '{label}' enables "
                        f"{have}; add a network interface with interface_type 'efa' (card 0) or 'efa-only' on "
                        f"every network_card_index 0..{need - 1}, or NCCL runs over TCP at a fraction of the "
                        f"bandwidth.", target)
            elif n.cloud == "tencentcloud" and is_tencent_hcc(n.instance_type):
                ref = view.ref(n.resource, "hpcClusterId", (TC_HPC_CLUSTER,))
                if not ref.present:
                    continue  # placement-required reports the missing HPC cluster
                key = ref.resource.urn if ref.resource is not None else ref.outside
                if key is None:
                    continue
                if hpc_home is None:
                    hpc_home = key
                elif key != hpc_home:
                    report_violation(
                        f"GPU node '{short(n.urn)}' of cluster '{label}' is in a different HPC cluster than "
                        f"'{short(nodes[0].urn)}'; RDMA only connects nodes of one HPC cluster, so put every "
                        f"node in the same one.", n.urn)


rdma_enabled = StackValidationPolicy(
    name="rdma-enabled",
    description="In a multi-node cluster, RDMA-capable shapes use all their EFA interfaces (AWS) or one shared "
                "HPC cluster (Tencent HCC).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_rdma_enabled,
    config_schema=PolicyConfigSchema(properties={
        "minNodes": {
            "type": "integer", "minimum": 1, "default": 2,
            "description": "From this many GPU machines on, inter-node RDMA is required.",
        },
        "efaInterfaces": {
            "type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "default": {},
            "description": "EFA interface counts per instance type, added to or overriding the built-in table.",
        },
    }),
    remediation_steps="List one EFA interface per network card in the launch template (p5: 32, p5en: 16, "
                      "p4d: 4); on Tencent, put all HCC nodes in one HPC cluster.",
)


# ---- imdsv2-required ---------------------------------------------------------------------------------

_IMDS_TYPES = ("aws:ec2/instance:Instance", "aws:ec2/spotInstanceRequest:SpotInstanceRequest", AWS_LAUNCH_TEMPLATE)


def _imdsv2_required(args: Any, report_violation: Any) -> None:
    if args.resource_type not in _IMDS_TYPES:
        return
    props = args.props
    if config_value(args, "gpuNodesOnly", False) is True and not is_gpu_type(as_str(get(props, "instanceType"))):
        return
    tokens, endpoint = get(props, "metadataOptions.httpTokens"), get(props, "metadataOptions.httpEndpoint")
    if tokens is UNKNOWN or endpoint is UNKNOWN or tokens == "required" or endpoint == "disabled":
        return
    if tokens is None and args.resource_type != AWS_LAUNCH_TEMPLATE and get(props, "launchTemplate") is not None:
        return  # the instance inherits its launch template's metadata options, checked on the template
    kind = "launch template" if args.resource_type == AWS_LAUNCH_TEMPLATE else "instance"
    report_violation(
        f"The {kind} '{args.name}' allows IMDSv1 (metadataOptions.httpTokens is "
        f"{repr(tokens) if tokens is not None else 'unset'}); set metadata_options.http_tokens='required' so "
        f"instance credentials cannot be read through a request-forgery bug.")


imdsv2_required = ResourceValidationPolicy(
    name="imdsv2-required",
    description="AWS instances and launch templates require IMDSv2 session tokens (httpTokens: required).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_imdsv2_required,
    config_schema=PolicyConfigSchema(properties={
        "gpuNodesOnly": {
            "type": "boolean", "default": False,
            "description": "Check only instances and templates with a GPU instance type.",
        },
    }),
    remediation_steps="Set metadata_options={'http_tokens': 'required', 'http_endpoint': 'enabled'}.",
)
