"""Catalog integrity and tier resolution: pure data and pure functions, no Pulumi."""

from __future__ import annotations

import datetime

import pytest

from components import catalog, tiers
from components.catalog import CLOUDS

KNOWN_SOURCES = {"aws-offers", "skypilot", "karpenter", "torchx", "ec2-efa", "ec2-accel", "tc-gpu", "tke-guide", "tc-hcc", "tke-rdma"}


def all_shapes():
    return [s for cloud in CLOUDS for s in catalog.shapes(cloud).values()]


@pytest.mark.parametrize("shape", all_shapes(), ids=lambda s: s.type)
def test_every_row_names_its_sources_and_date(shape):
    assert shape.source and set(shape.source) <= KNOWN_SOURCES, shape.source
    assert isinstance(shape.as_of, datetime.date)
    fields = set(shape.__dataclass_fields__)
    assert set(shape.unconfirmed) <= fields, f"unconfirmed names unknown fields: {shape.unconfirmed}"


@pytest.mark.parametrize("shape", all_shapes(), ids=lambda s: s.type)
def test_rows_are_physically_consistent(shape):
    assert shape.gpu_count >= 1 and shape.vcpu >= 4 and shape.mem_gib >= 16
    assert (shape.nvme_count == 0) == (shape.nvme_gb == 0)
    assert shape.price_hourly is None or shape.price_hourly > 0
    if shape.price_hourly is not None:
        assert shape.price_region, "a price needs the region it was quoted for"


def test_every_limit_and_price_names_its_source():
    for cloud in CLOUDS:
        for name, limit in catalog.limits(cloud).items():
            assert limit.source and isinstance(limit.as_of, datetime.date), name
        for name, entry in catalog.prices(cloud).items():
            if isinstance(entry, dict) and "price" in entry:
                assert entry["source"] and entry["as_of"], name


def test_efa_counts_match_the_documented_layouts():
    aws = catalog.shapes("aws")
    assert {t: aws[t].rdma_interfaces for t in ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p4d.24xlarge",
                                                "g4dn.xlarge")} == {
        "p5.48xlarge": 32, "p5e.48xlarge": 32, "p5en.48xlarge": 16, "p4d.24xlarge": 4, "g4dn.xlarge": 0}


@pytest.mark.parametrize("cloud", CLOUDS)
@pytest.mark.parametrize("tier", tiers.TIERS)
def test_every_tier_resolves_on_every_cloud(cloud, tier):
    res = tiers.resolve(cloud, tier)
    assert res.shape.type == tiers.RULES[tier].default_shape[cloud]
    assert res.shape.type in tiers.allowed_types(cloud, tier)


def test_tier_membership():
    assert set(tiers.allowed_types("aws", "entry")) == {
        "g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge", "g4dn.8xlarge", "g4dn.16xlarge",
        "g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.16xlarge"}
    assert set(tiers.allowed_types("aws", "mid")) == {"p4d.24xlarge", "p4de.24xlarge"}
    assert set(tiers.allowed_types("aws", "large")) == {"p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"}
    assert set(tiers.allowed_types("tencentcloud", "mid")) == {"GT4.20XLARGE474"}
    assert set(tiers.allowed_types("tencentcloud", "large")) == {"HCCPNV6.96XLARGE2304"}
    assert "PNV4.7XLARGE116" in tiers.allowed_types("tencentcloud", "entry")


def test_only_aws_mid_carries_the_no_4xa100_note():
    notes = {(c, t): tiers.resolve(c, t).notes for c in CLOUDS for t in tiers.TIERS}
    with_note = {k for k, v in notes.items() if any("no 4×A100" in n for n in v)}
    assert with_note == {("aws", "mid")}


def test_shape_outside_tier_names_the_allowed_types():
    with pytest.raises(tiers.TierError, match=r"does not fit tier mid .* allows: p4d.24xlarge, p4de.24xlarge"):
        tiers.resolve("aws", "mid", "g5.12xlarge")


def _one_node_plan(shape, region: str):
    from gpu_cluster.plan import Plan

    # A shape sold only in Capacity Blocks runs only in one: a node of a 24-hour block.
    block = {"instanceMarketOptions": {"marketType": "capacity-block"}, "tags": {"gpu-cluster:block-hours": "24"}} \
        if shape.block_only else {}
    node = ({"type": "aws:ec2/instance:Instance", "inputs": {"instanceType": shape.type, **block}}
            if shape.cloud == "aws" else
            {"type": "tencentcloud:Instance/instance:Instance",
             "inputs": {"instanceType": shape.type, "instanceChargeType": "POSTPAID_BY_HOUR"}})
    resources = [{"urn": f"urn:pulumi:s::p::pulumi:providers:{shape.cloud}::default", "custom": True,
                  "type": f"pulumi:providers:{shape.cloud}", "inputs": {"region": region}},
                 {"urn": f"urn:pulumi:s::p::{node['type']}::node-0", "custom": True, "id": "i-0", **node}]
    return Plan.from_doc({"version": 3, "deployment": {"resources": resources}})


def test_catalog_prices_every_shape_in_every_region_as_plan_does():
    """`catalog` and `plan` are one model of a price: for every shape, in every region it is priced or
    sold in, the catalog's hourly price is the unit price plan gives a node of it (value, currency,
    estimate flag), or both say it is unpriced; for a shape sold only in Capacity Blocks, a node in a block."""
    from gpu_cluster.commands.catalog import collect, unit_price
    from gpu_cluster.pricing import price_plan
    from gpu_cluster.pricebook import load_book

    book = load_book()
    checked = 0
    for cloud in catalog.CLOUDS:
        for shape in catalog.shapes(cloud).values():
            regions = {shape.price_region or catalog.prices(cloud).get("region"), *catalog.sold_regions(shape)}
            for region in sorted(r for r in regions if r):
                row = next(r for r in collect(cloud, None, region)["shapes"] if r["type"] == shape.type) \
                    if catalog.sold_in(shape, region) else None
                price = row["price"] if row else unit_price(shape, region, book)
                [line] = [i for i in price_plan(_one_node_plan(shape, region), book).items if "GPU node" in i.item]
                assert price["hourly"] == line.unit_price and price["estimate"] == line.estimate, (shape.type, region)
                assert price["currency"] == price_plan(_one_node_plan(shape, region), book).currency
                checked += 1
    assert checked > 40


def test_aws_shapes_record_where_they_are_sold_with_their_partitions():
    """From the AWS Price List (aws-offers): p5 is not sold in China; g5 and g4dn are, in both China regions;
    p4d only in Ningxia; GovCloud where it has a price."""
    p5, g5, p4d = (catalog.shape("aws", t) for t in ("p5.48xlarge", "g5.xlarge", "p4d.24xlarge"))
    assert not catalog.sold_in(p5, "cn-north-1") and catalog.sold_in(p5, "us-east-1") and "us-gov-west-1" in p5.regions
    assert {"cn-north-1", "cn-northwest-1"} <= set(g5.regions) and "us-gov-west-1" not in g5.regions
    assert catalog.sold_in(p4d, "cn-northwest-1") and not catalog.sold_in(p4d, "cn-north-1")
    recorded = [s for s in catalog.shapes("aws").values() if "aws-offers" in s.source]
    assert len(recorded) == 11 and all(s.regions for s in recorded)
    # p5e has no on-demand SKU anywhere: sold only in Capacity Blocks, in the blocks' regions.
    p5e = catalog.shape("aws", "p5e.48xlarge")
    assert p5e.block_only and set(p5e.regions) == set(catalog.limit("aws", "capacity_block")["offered"]["p5e.48xlarge"])
    # p4de's two regions come from its SkyPilot row (DescribeInstanceTypeOfferings data), as before.
    assert catalog.shape("aws", "p4de.24xlarge").regions == ("us-east-1", "us-west-2")
