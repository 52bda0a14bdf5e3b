"""The pricer over the public catalog: prices × quantities, unpriced items listed (never zero), spot,
region and currency conversion flagged. Every test prices with the catalog alone (no price file, no
cache), so a committed prices/cache.json cannot change what these figures mean."""

from __future__ import annotations

import pytest

from gpu_cluster.plan import Plan
from gpu_cluster import pricing
from gpu_cluster.pricebook import catalog_book
from gpu_cluster.pricing import HOURS_PER_MONTH

P5, P4D, G4DN = 55.04, 21.957642, 0.526
GP3, FSX125, NAT = 0.08, 0.145, 0.045
M7I = 0.1008                                         # the Slurm head node's shape (prices.yaml instance)
FSX250, FSX500, FSX1000 = 0.282, 0.471, 0.849      # ap-northeast-1 (2022), third-party: estimates
USD_CNY = 7.1057                                     # catalog exchange rate (CFETS 2025-09-23)
GN7, HSSD = 1.26, 0.219                            # Tencent international site, USD
CFS_TB, CFS_TP = 0.6, 1.4                            # CNY per GiB-month


def price_plan(plan):
    return pricing.price_plan(plan, catalog_book())


def export(*resources: dict, region: str = "us-east-1", cloud: str = "aws") -> Plan:
    provider = {"urn": f"urn:pulumi:s::p::pulumi:providers:{cloud}::default", "type": f"pulumi:providers:{cloud}",
                "custom": True, "inputs": {"region": region}}
    return Plan.from_doc({"version": 3, "deployment": {"resources": [provider, *resources]}})


def res(type_: str, name: str, rid: str = "", **inputs) -> dict:
    return {"urn": f"urn:pulumi:s::p::{type_}::{name}", "type": type_, "custom": True, "id": rid or name,
            "inputs": inputs, "outputs": {}}


LT = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", "lt-1", instanceType="p5.48xlarge",
         blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 500, "volumeType": "gp3"}}])


def node(i: int, market: str | None = None, lt: str = "lt-1") -> dict:
    extra = {"instanceMarketOptions": {"marketType": market}} if market else {}
    return res("aws:ec2/instance:Instance", f"node-{i}", launchTemplate={"id": lt, "version": "$Latest"}, **extra)


def test_aws_large_by_hand():
    plan = export(LT, node(0), node(1),
                  res("aws:ebs/volume:Volume", "data-0", size=1000, type="gp3"),
                  res("aws:ebs/volume:Volume", "data-1", size=1000, type="gp3"),
                  res("aws:fsx/lustreFileSystem:LustreFileSystem", "lustre", storageCapacity=4800,
                      perUnitStorageThroughput=125),
                  res("aws:ec2/natGateway:NatGateway", "nat"),
                  res("aws:s3/bucket:Bucket", "checkpoints"))
    cost = price_plan(plan)
    expected = 2 * P5 * 730 + 2 * 500 * GP3 + 2 * 1000 * GP3 + 4800 * FSX125 + 730 * NAT
    assert cost.currency == "USD"
    assert cost.total == pytest.approx(expected, abs=0.02)
    assert cost.unpriced == []
    assert [i.item for i in cost.usage_based] == ["S3 bucket checkpoints"]
    assert all(i.source for i in cost.items)
    assert cost.estimate, "the FSx 125 price comes from a third-party page, so the total is an estimate"


def test_unknown_prices_are_unpriced_not_zero():
    plan = export(res("aws:fsx/lustreFileSystem:LustreFileSystem", "lustre", storageCapacity=4800,
                      perUnitStorageThroughput=750))
    cost = price_plan(plan)
    assert cost.total == 0 and len(cost.unpriced) == 1
    assert cost.unpriced[0].monthly is None and cost.unpriced[0].unit_price is None
    assert cost.as_dict()["unpriced"][0]["item"].startswith("FSx for Lustre 4800 GiB at 750")
    assert cost.unpriced[0].lookup == "aws fsx_lustre_gb_month 750 @ us-east-1" and cost.unpriced[0].origin == ""


@pytest.mark.parametrize("tput,price", [(250, FSX250), (500, FSX500), (1000, FSX1000)])
def test_fsx_persistent2_classes_are_priced_as_estimates_at_the_rates_found(tput, price):
    plan = export(res("aws:fsx/lustreFileSystem:LustreFileSystem", "lustre", storageCapacity=4800,
                      perUnitStorageThroughput=tput))
    (item,) = price_plan(plan).items
    assert item.monthly == pytest.approx(4800 * price, abs=0.01)
    assert item.estimate and "ap-northeast-1 rates" in item.note and item.origin == "catalog"
    assert item.as_of == "2022-09-03"


def test_tencent_shapes_without_public_price_are_unpriced():
    plan = export(res("tencentcloud:Instance/instance:Instance", "node-0", instanceType="GT4.20XLARGE474",
                      instanceChargeType="POSTPAID_BY_HOUR", systemDiskType="LOCAL_BASIC", systemDiskSize=200),
                  cloud="tencentcloud", region="ap-shanghai")
    cost = price_plan(plan)
    assert cost.currency == "CNY" and cost.total == 0
    assert [i.item for i in cost.unpriced] == ["GPU nodes 1 × GT4.20XLARGE474", "CBS system disk LOCAL_BASIC 200 GB"]
    assert cost.unpriced[0].note == "unpriced"


def test_usd_prices_in_a_cny_total_are_converted_at_the_dated_rate_and_flagged():
    plan = export(res("tencentcloud:Instance/instance:Instance", "node-0", instanceType="GN7.2XLARGE32",
                      instanceChargeType="POSTPAID_BY_HOUR"), cloud="tencentcloud", region="ap-guangzhou")
    (item,) = price_plan(plan).items
    assert item.monthly == pytest.approx(GN7 * USD_CNY * 730, abs=0.05)
    assert item.estimate and "converted at 1 USD = 7.1057 CNY" in item.note and "2025-09-23" in item.note


def test_spot_uses_the_catalog_discount_where_known():
    lt = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", "lt-1", instanceType="g4dn.xlarge")
    cost = price_plan(export(lt, node(0, "spot")))
    (item,) = cost.items
    assert item.unit_price == pytest.approx(G4DN * (1 - 0.62)) and item.estimate


def test_spot_without_a_discount_is_priced_at_on_demand_and_flagged():
    cost = price_plan(export(LT, node(0, "spot")))
    node_item = cost.items[0]
    assert node_item.monthly == pytest.approx(P5 * HOURS_PER_MONTH) and node_item.estimate
    assert "upper bound" in node_item.note


def test_other_regions_are_flagged_as_estimates():
    lt = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", "lt-1", instanceType="g4dn.xlarge")
    cost = price_plan(export(lt, node(0), region="us-west-2"))
    assert cost.items[0].estimate and "us-east-1 rates" in cost.items[0].note


# Hand-computed from the catalog rows (instances.yaml, prices.yaml): 730 h a month; gp3 $0.08/GB-month;
# NAT $0.045/h; FSx PERSISTENT_2 250/500 at the ap-northeast-1 figures.
# Every sample stack has a Slurm head node: m7i.large all month, its 30 GB root and 20 GB state volume.
HEAD = M7I * 730 + (30 + 20) * GP3
SAMPLE_TOTALS = {
    "aws-entry": 0.526 * 730 + 100 * GP3 + 200 * GP3 + 730 * NAT + HEAD,                          # 1 × g4dn.xlarge
    "aws-mid": 21.957642 * 730 + 200 * GP3 + 1000 * GP3 + 730 * NAT + 2400 * FSX250 + HEAD,       # 1 × p4d.24xlarge
    "aws-large": 2 * 55.04 * 730 + 2 * 500 * GP3 + 2 * 1000 * GP3 + 730 * NAT + 4800 * FSX500 + HEAD,  # 2 × p5.48xlarge
}


@pytest.mark.parametrize("stack", sorted(SAMPLE_TOTALS))
def test_aws_sample_stacks_price_as_computed_by_hand(sample_plan, stack):
    cost = price_plan(sample_plan(stack))
    assert cost.total == pytest.approx(SAMPLE_TOTALS[stack], abs=0.05)
    assert cost.unpriced == []
    assert all(i.origin == "catalog" and i.as_of for i in cost.items)
    assert [i.item for i in cost.usage_based] == [i.item for i in cost.usage_based if i.item.startswith("S3 bucket")]
    assert len(cost.usage_based) == 1


# Tencent in CNY: international-site USD prices × the catalog rate, CFS Turbo in CNY. What no public
# page prices stays unpriced: the GT4 and HCC GPU nodes and the HCC local system disks. The samples run
# the default TencentOS image, hence no Slurm head node (its pricing is tested below).
# The standard NAT gateway the program creates: its instance fee (0.034 USD/h in the mainland regions and Hong
# Kong), not its CU fee (by use).
HEAD_DISKS = HSSD * (50 + 20) * USD_CNY
NAT_STANDARD = 0.034 * 730
TC_TOTALS = {  # every Tencent sample has a Slurm head node (its disks priced, its Standard S5 not)
    "tencent-entry": (GN7 * 730 + HSSD * (100 + 200) + NAT_STANDARD) * USD_CNY + HEAD_DISKS,
    "tencent-mid": (HSSD * (2 * 200 + 2 * 1000 + 2 * 1000) + NAT_STANDARD) * USD_CNY + 20480 * CFS_TP + HEAD_DISKS,
    "tencent-large": (HSSD * (2 * 500 + 2 * 2000) + NAT_STANDARD) * USD_CNY + 40960 * CFS_TB + HEAD_DISKS,
}
TC_UNPRICED = {
    "tencent-entry": ["head node 1 × S5.LARGE8"],
    "tencent-mid": ["GPU nodes 1 × GT4.20XLARGE474"] * 2 + ["head node 1 × S5.LARGE8"],
    "tencent-large": ["GPU nodes 1 × HCCPNV6.96XLARGE2304"] * 2 + ["head node 1 × S5.LARGE8"],
}


def test_tencent_slurm_head_node_prices_its_disks_and_leaves_its_shape_unpriced(sample_plan, render_cluster):
    """The head node's 50 GB system and 20 GB state disks are priced; Standard S5 has no public price."""
    without = price_plan(render_cluster("tencent-entry", {"scheduler": "none"}))
    with_head = price_plan(sample_plan("tencent-entry"))
    assert with_head.total - without.total == pytest.approx(HEAD_DISKS, abs=0.5)
    assert sorted(i.item for i in with_head.unpriced) == ["head node 1 × S5.LARGE8"]
    assert not without.unpriced


@pytest.mark.parametrize("stack", sorted(TC_TOTALS))
def test_tencent_sample_stacks_price_what_public_pages_price(sample_plan, stack):
    cost = price_plan(sample_plan(stack))
    assert cost.currency == "CNY"
    assert cost.total == pytest.approx(TC_TOTALS[stack], abs=0.5)
    assert sorted(i.item for i in cost.unpriced) == sorted(TC_UNPRICED[stack])
    assert {i.item.split(" ")[0] for i in cost.usage_based} == {"EIP", "COS"}
