"""Compute guardrails: on-demand capacity for critical clusters, packed placement, full RDMA, IMDSv2."""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from .props import UNKNOWN, as_int, as_str, get, items, known, short
from .shapes import efa_interfaces, is_gpu_type, is_tencent_hcc
from .stack import (AWS_BATCH, AWS_EMR, AWS_NOTEBOOK, AWS_ASG, AWS_INSTANCE, AWS_LAUNCH_CONFIG, AWS_LAUNCH_TEMPLATE, AWS_PLACEMENT_GROUP,
                    AWS_SPOT_FLEET, AWS_SPOT_REQUEST, Node, Ref, StackView, config_list, config_value,
                    report_unknowns, strict, view_of)


# ---- no-spot-only-critical -------------------------------------------------------------------------

def _no_spot_only_critical(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    report_unknowns(args, view.gpu_nodes(), "no-spot-only-critical", report_violation)
    critical = {v.strip().lower() for v in config_list(args, "criticalValues") if isinstance(v, str)} or {"critical"}
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

_PG_KEYS = ("name", "id", "placementGroupId", "arn")


def _placement_ref(view: StackView, node: Node) -> Ref:
    """The placement group a node's machines launch into: its own setting, else its launch template's."""
    res = node.resource
    if res.resource_type in (AWS_INSTANCE, AWS_SPOT_REQUEST, AWS_ASG):
        for key in ("placementGroup", "placementGroupId"):
            if get(res.props, key) is not None:
                return view.ref(res, key, (AWS_PLACEMENT_GROUP,), keys=_PG_KEYS)
    if res.resource_type == AWS_BATCH and get(res.props, "computeResources.placementGroup") is not None:
        return view.ref(res, "computeResources", (AWS_PLACEMENT_GROUP,),
                        value=get(res.props, "computeResources.placementGroup"), keys=_PG_KEYS)
    if res.resource_type == AWS_SPOT_FLEET:
        for spec in items(get(res.props, "launchSpecifications")):
            if get(spec, "placementGroup") is not None:
                return view.ref(res, "launchSpecifications", (AWS_PLACEMENT_GROUP,),
                                value=get(spec, "placementGroup"), keys=_PG_KEYS)
    for tref in node.templates:
        lt = tref.resource
        if lt is None:
            if tref.unknown:
                return Ref(present=True)  # the template is unknown until the update: nothing to judge
            continue
        for key in ("placement.groupName", "placement.groupId"):
            if get(lt.props, key) is not None:
                return view.ref(lt, "placement", (AWS_PLACEMENT_GROUP,), value=get(lt.props, key), keys=_PG_KEYS)
    return Ref()


def _in_capacity_block(node: Node) -> bool:
    """Whether the node launches into an EC2 Capacity Block, whose instances AWS places close together
    itself ("there is no need to use a cluster placement group": EC2 user guide, "Use Capacity Blocks",
    docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html).
    A capacity-block market without a reservation to launch into does not count (EC2 refuses it)."""
    sources = [node.resource.props] + [t.resource.props for t in node.templates if t.resource is not None]
    market = any(get(p, "instanceMarketOptions.marketType") == "capacity-block" for p in sources)
    target = any(get(p, "capacityReservationSpecification.capacityReservationTarget.capacityReservationId")
                 is not None for p in sources)
    return market and target


def _aws_placement(view: Any, n: Any, label: str, why: str, report_violation: Any) -> None:
    """An AWS node outside a Capacity Block (which AWS packs itself) needs a cluster placement group."""
    if _in_capacity_block(n):
        return
    ref = _placement_ref(view, n)
    if not ref.present:
        report_violation(
            f"GPU node '{n.label}' of cluster '{label}' ({why}) has no placement group; put every node in "
            f"one placement group with strategy 'cluster' so NCCL traffic stays on one network spine.",
            n.urn)
    elif ref.resource is not None:
        strategy = get(ref.resource.props, "strategy")
        if known(strategy) and strategy != "cluster":
            report_violation(
                f"GPU node '{n.label}' of cluster '{label}' is in placement group "
                f"'{short(ref.resource.urn)}' with strategy '{strategy}'; use strategy 'cluster'.",
                n.urn)


def _tencent_placement(view: Any, n: Any, label: str, why: str, report_violation: Any) -> None:
    """A Tencent HCC (RDMA) node must sit in an HPC cluster; other shapes have no placement to ask for."""
    if not is_tencent_hcc(n.instance_type):
        return
    if n.hpc is None:
        report_violation(
            f"GPU node group '{n.label}' of cluster '{label}' ({why}) launches an HCC shape "
            f"({n.instance_type}), but Auto Scaling groups and TKE node pools cannot place machines in an "
            f"HPC cluster (no hpc_cluster_id), so they get no RDMA network; run HCC nodes as "
            f"tencentcloud.Instance (or cluster worker configs) with hpc_cluster_id.", n.urn)
    elif not n.hpc.present:
        report_violation(
            f"GPU node '{n.label}' of cluster '{label}' ({why}) is an HCC shape ({n.instance_type}) "
            f"outside any HPC cluster, so it has no RDMA network; create a tencentcloud.cvm.HpcCluster "
            f"in the cluster's zone and set hpc_cluster_id on every node.", n.urn)


UNPLACEABLE = (AWS_NOTEBOOK, AWS_EMR)
"""GPU capacity no placement group can hold (a SageMaker notebook has no placement option; an EMR cluster's
placement_group_configs place only its primary nodes, with strategy SPREAD: EMR management guide, "EMR
integration with EC2 placement groups"): counted in the cluster, never asked for one."""

_PLACEMENT = {"aws": _aws_placement, "tencentcloud": _tencent_placement}
"""How each cloud packs a cluster's nodes together."""


def _placement_required(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    report_unknowns(args, view.gpu_nodes(), "placement-required", report_violation)
    min_nodes = as_int(config_value(args, "minNodes", 2)) or 2
    tiers = {v for v in config_list(args, "alwaysForTiers") if isinstance(v, str)}
    for cluster, nodes in view.clusters().items():
        total = sum(n.count for n in nodes)
        if total < min_nodes and not any(n.tier in tiers for n in nodes):
            continue
        why = f"{total} nodes" if total >= min_nodes else f"tier {nodes[0].tier}"
        label = cluster or "(untagged)"
        for n in nodes:
            if n.resource.resource_type in UNPLACEABLE:
                continue
            check = _PLACEMENT.get(n.cloud)
            if check is not None:
                check(view, n, label, why, report_violation)


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


def _aws_rdma(n: Any, label: str, nodes: list, state: dict, report_violation: Any) -> None:
    """An AWS node enables every EFA interface its shape has (one per network card), through its launch
    template: launch configurations and spot-fleet launch specifications cannot declare them."""
    need = max((efa_interfaces(t, state["overrides"]) for t in n.instance_types), default=0)
    if need == 0:
        return
    tref = next((r for r in n.templates if r.resource is None or r.resource.resource_type in
                 (AWS_LAUNCH_TEMPLATE, AWS_LAUNCH_CONFIG)), None)
    if tref is not None and tref.resource is None:
        return  # a template unknown during preview, or one this stack cannot see
    lt = tref.resource if tref is not None else None
    if lt is not None and get(lt.props, "networkInterfaces") is UNKNOWN:
        return
    have = _efa_cards(lt) if lt is not None and lt.resource_type == AWS_LAUNCH_TEMPLATE else 0
    target = lt.urn if lt is not None else n.urn
    if have < need and target not in state["reported"]:
        state["reported"].add(target)
        kind = "launch configuration" if lt is not None and lt.resource_type == AWS_LAUNCH_CONFIG \
            else "launch template"
        where = f"{kind} '{short(lt.urn)}'" if lt is not None else f"node '{n.label}'"
        report_violation(
            f"{n.instance_type} has {need} EFA interfaces but {where} of cluster '{label}' enables "
            f"{have}; launch it from a launch template with a network interface of interface_type "
            f"'efa' (card 0) or 'efa-only' on every network_card_index 0..{need - 1}, or NCCL runs over "
            f"TCP at a fraction of the bandwidth.", target)


def _tencent_rdma(n: Any, label: str, nodes: list, state: dict, report_violation: Any) -> None:
    """Tencent HCC nodes of one cluster share one HPC cluster: RDMA connects only its members."""
    if not is_tencent_hcc(n.instance_type):
        return
    ref = n.hpc
    if ref is None or not ref.present:
        return  # placement-required reports the missing HPC cluster
    key = ref.resource.urn if ref.resource is not None else ref.outside
    if key is None:
        return
    if state.get("hpc_home") is None:
        state["hpc_home"] = key
    elif key != state["hpc_home"]:
        report_violation(
            f"GPU node '{n.label}' of cluster '{label}' is in a different HPC cluster than "
            f"'{nodes[0].label}'; RDMA only connects nodes of one HPC cluster, so put every "
            f"node in the same one.", n.urn)


_RDMA = {"aws": _aws_rdma, "tencentcloud": _tencent_rdma}
"""How each cloud's RDMA network reaches every node of a cluster."""


def _rdma_enabled(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    report_unknowns(args, view.gpu_nodes(), "rdma-enabled", report_violation)
    min_nodes = as_int(config_value(args, "minNodes", 2)) or 2
    overrides_raw = get(args.get_config(), "efaInterfaces")
    overrides = {k: get(overrides_raw, (k,)) for k in overrides_raw} if hasattr(overrides_raw, "keys") else {}
    reported: set[str] = set()
    for cluster, nodes in view.clusters().items():
        if sum(n.count for n in nodes) < min_nodes:
            continue
        label = cluster or "(untagged)"
        state = {"overrides": overrides, "reported": reported, "hpc_home": None}
        for n in nodes:
            check = _RDMA.get(n.cloud)
            if check is not None:
                check(n, label, nodes, state, report_violation)


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

IMDS_TYPES = (AWS_INSTANCE, AWS_SPOT_REQUEST, AWS_LAUNCH_TEMPLATE, AWS_LAUNCH_CONFIG, AWS_SPOT_FLEET, AWS_NOTEBOOK)


def _imds_gpu(props: Any, resource_type: str) -> bool:
    types = [get(props, "instanceType")] + [get(s, "instanceType") for s in items(get(props, "launchSpecifications"))]
    return any(is_gpu_type((as_str(t) or "").removeprefix("ml.")) for t in types)  # ml.: SageMaker


def _imdsv2_required(args: Any, report_violation: Any) -> None:
    t, props = args.resource_type, args.props
    if t not in IMDS_TYPES:
        return
    if config_value(args, "gpuNodesOnly", False) is True and not _imds_gpu(props, t):
        return
    if t == AWS_NOTEBOOK:
        # SageMaker notebooks allow IMDSv1 unless told otherwise (CreateNotebookInstance,
        # InstanceMetadataServiceConfiguration.MinimumInstanceMetadataServiceVersion: "1" or "2", default "1").
        version = get(props, "instanceMetadataServiceConfiguration.minimumInstanceMetadataServiceVersion")
        if version is not UNKNOWN and as_str(version) != "2":
            report_violation(
                f"The SageMaker notebook '{args.name}' allows IMDSv1; set instance_metadata_service_configuration."
                f"minimum_instance_metadata_service_version='2'.")
        return
    if t == AWS_SPOT_FLEET:
        # Spot-fleet launch specifications have no metadata options (pulumi-aws 7.51.1
        # SpotFleetRequestLaunchSpecificationArgs): only a launch template can require IMDSv2.
        specs = items(get(props, "launchSpecifications"))
        if specs:
            report_violation(
                f"The spot fleet request '{args.name}' launches {len(specs)} launch specification(s), which cannot "
                f"require IMDSv2; use launch_template_configs with a launch template whose "
                f"metadata_options.http_tokens is 'required'.")
        return
    tokens, endpoint = get(props, "metadataOptions.httpTokens"), get(props, "metadataOptions.httpEndpoint")
    if (tokens is UNKNOWN or endpoint is UNKNOWN) and strict(args) and endpoint != "disabled" \
            and tokens != "required":
        report_violation(f"'{args.name}': metadataOptions is unknown until the update, so imdsv2-required cannot be "
                         f"judged, and strict mode accepts nothing it cannot see.")
        return
    if tokens is UNKNOWN or endpoint is UNKNOWN or tokens == "required" or endpoint == "disabled":
        return
    if tokens is None and t in (AWS_INSTANCE, AWS_SPOT_REQUEST) and get(props, "launchTemplate") is not None:
        return  # the instance inherits its launch template's metadata options, checked on the template
    kind = {AWS_LAUNCH_TEMPLATE: "launch template", AWS_LAUNCH_CONFIG: "launch configuration"}.get(t, "instance")
    report_violation(
        f"The {kind} '{args.name}' allows IMDSv1 (metadataOptions.httpTokens is "
        f"{repr(tokens) if tokens is not None else 'unset'}); set metadata_options.http_tokens='required' so "
        f"instance credentials cannot be read through a request-forgery bug.")


imdsv2_required = ResourceValidationPolicy(
    name="imdsv2-required",
    description="AWS instances, launch templates, launch configurations and spot fleets require IMDSv2 session "
                "tokens (httpTokens: required).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_imdsv2_required,
    config_schema=PolicyConfigSchema(properties={
        "gpuNodesOnly": {
            "type": "boolean", "default": False,
            "description": "Check only instances, templates and fleets with a GPU instance type.",
        },
    }),
    remediation_steps="Set metadata_options={'http_tokens': 'required', 'http_endpoint': 'enabled'}.",
)
