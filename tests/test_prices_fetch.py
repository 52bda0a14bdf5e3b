"""`gpu-cluster prices fetch` on recorded API responses, both clouds; nothing here touches the network.

AWS: a real botocore `pricing` client under botocore's Stubber, answering GetProducts with PriceList
documents in the shape the AWS CLI documents (awscli/examples/pricing/get-products.rst: product.sku,
product.attributes, terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD). Tencent: the SDK's real
CvmClient / CbsClient / VpcClient with the HTTP transport (ApiRequest.conn.request) replaced by a
function that returns recorded {"Response": ...} bodies. The figures in these responses are test
figures, not claims about today's prices.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from components import catalog
from components.headnode import HEAD_INSTANCE_TYPES
from gpu_cluster import cli, pricing
from gpu_cluster.pricebook import fetch_aws, fetch_tencent, load_book
from gpu_cluster.pricebook.cache import PriceCache

NOW = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.timezone.utc)


# ---- AWS ------------------------------------------------------------------------------------------

def product(service: str, sku: str, attrs: dict, unit: str, usd: str, description: str, begin: str = "0") -> str:
    rate = f"{sku}.JRTCKXETXF.6YS6EN2CT7"
    return json.dumps({
        "product": {"productFamily": attrs.get("productFamily", "Compute Instance"), "attributes": attrs, "sku": sku},
        "serviceCode": service,
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
            "priceDimensions": {rate: {"unit": unit, "endRange": "Inf", "description": description, "appliesTo": [],
                                       "rateCode": rate, "beginRange": begin, "pricePerUnit": {"USD": usd}}},
            "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "JRTCKXETXF", "termAttributes": {}}}},
        "version": "20261120000000", "publicationDate": "2026-11-20T00:00:00Z"})


def tm(field: str, value: str) -> dict:
    return {"Type": "TERM_MATCH", "Field": field, "Value": value}


INSTANCE_USD = {"p5.48xlarge": "54.0000000000", "g4dn.xlarge": "0.5260000000"}


def aws_expectations(region: str, types: list[str], instance_usd: dict) -> list[tuple[dict, dict]]:
    """(expected params, recorded response) for every GetProducts call of one fetch, in call order."""
    r = tm("regionCode", region)
    calls = []
    for t in types:
        usd = instance_usd.get(t)
        plist = [product("AmazonEC2", f"SKU{t.replace('.', '')}", {"instanceType": t, "regionCode": region}, "Hrs",
                         usd, f"${usd} per On Demand Linux {t} Instance Hour")] if usd else []
        calls.append(({"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": 100,
                       "Filters": [r, tm("instanceType", t), tm("operatingSystem", "Linux"), tm("tenancy", "Shared"),
                                   tm("preInstalledSw", "NA"), tm("capacitystatus", "Used"),
                                   tm("licenseModel", "No License required")]},
                      {"FormatVersion": "aws_v1", "PriceList": plist}))
    calls.append(({"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": 100,
                   "Filters": [r, tm("productFamily", "Storage"), tm("volumeApiName", "gp3")]},
                  {"FormatVersion": "aws_v1", "PriceList": [product(
                      "AmazonEC2", "GP3SKU", {"productFamily": "Storage", "volumeApiName": "gp3"}, "GB-Mo",
                      "0.0800000000", "$0.08 per GB-month of General Purpose (gp3) provisioned storage")]}))
    calls.append(({"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": 100,
                   "Filters": [r, tm("productFamily", "NAT Gateway")]},
                  {"FormatVersion": "aws_v1", "PriceList": [
                      product("AmazonEC2", "NATBYTES", {"productFamily": "NAT Gateway",
                                                         "usagetype": "USE1-NatGateway-Bytes"}, "GB", "0.045",
                              "$0.045 per GB Data Processed by NAT Gateways"),
                      product("AmazonEC2", "NATHOURS", {"productFamily": "NAT Gateway",
                                                         "usagetype": "USE1-NatGateway-Hours"}, "Hrs", "0.045",
                              "$0.045 per NAT Gateway Hour")]}))
    calls.append(({"ServiceCode": "AmazonS3", "FormatVersion": "aws_v1", "MaxResults": 100,
                   "Filters": [r, tm("storageClass", "General Purpose"), tm("volumeType", "Standard")]},
                  {"FormatVersion": "aws_v1", "PriceList": [product(
                      "AmazonS3", "S3STD", {"storageClass": "General Purpose", "usagetype": "TimedStorage-ByteHrs"},
                      "GB-Mo", "0.0230000000", "$0.023 per GB - first 50 TB / month of storage used")]}))
    fsx = [product("AmazonFSx", f"FSX{t}", {"fileSystemType": "Lustre", "storageType": "SSD",
                                            "deploymentOption": "Persistent_2", "throughputCapacity": t},
                   "GB-Mo", usd, f"${usd} per GB-month, Lustre Persistent_2 SSD {t} MB/s/TiB")
           for t, usd in (("125", "0.145"), ("250", "0.210"), ("500", "0.340"), ("1000", "0.600"))]
    fsx.append(product("AmazonFSx", "FSXP1", {"fileSystemType": "Lustre", "storageType": "SSD",
                                              "deploymentOption": "Persistent_1", "throughputCapacity": "200"},
                       "GB-Mo", "0.290", "PERSISTENT_1 must not be taken for PERSISTENT_2"))
    for _ in fetch_aws.FSX_CLASSES:
        calls.append(({"ServiceCode": "AmazonFSx", "FormatVersion": "aws_v1", "MaxResults": 100,
                       "Filters": [r, tm("fileSystemType", "Lustre"), tm("storageType", "SSD")]},
                      {"FormatVersion": "aws_v1", "PriceList": fsx}))
    return calls


def stubbed_pricing(calls) -> tuple:
    client = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                           region_name="us-east-1").client("pricing")
    stub = Stubber(client)
    for params, response in calls:
        stub.add_response("get_products", response, params)
    stub.activate()
    return client, stub


def test_aws_fetch_reads_each_item_from_its_recorded_response():
    types = ["p5.48xlarge", "g4dn.xlarge", "p5e.48xlarge"]
    client, stub = stubbed_pricing(aws_expectations("us-east-1", types, INSTANCE_USD))
    items, problems = fetch_aws.fetch(client, "us-east-1", types, NOW)
    stub.assert_no_pending_responses()
    got = {(i.item, i.key): i.price for i in items}
    assert got == {("instance", "p5.48xlarge"): 54.0, ("instance", "g4dn.xlarge"): 0.526,
                   ("ebs_gb_month", "gp3"): 0.08, ("nat_gateway_hour", "-"): 0.045, ("s3_gb_month", "STANDARD"): 0.023,
                   ("fsx_lustre_gb_month", "125"): 0.145, ("fsx_lustre_gb_month", "250"): 0.21,
                   ("fsx_lustre_gb_month", "500"): 0.34, ("fsx_lustre_gb_month", "1000"): 0.6}
    assert problems == ["aws instance p5e.48xlarge in us-east-1: the Price List API returned no on-demand price "
                        "(0 product(s) matched the filters)"]
    nat = next(i for i in items if i.item == "nat_gateway_hour")
    assert "sku NATHOURS" in nat.source and "published 2026-11-20" in nat.source
    assert all(i.region == "us-east-1" and i.currency == "USD" and i.fetched_at == NOW for i in items)


def test_prices_fetch_command_writes_a_cache_that_prices_a_sample_offline(tmp_path, monkeypatch, sample_plan):
    # The GPU shapes and the Slurm head node's shape, which the command asks for too.
    types = list(catalog.shapes("aws")) + [HEAD_INSTANCE_TYPES["aws"]]
    usd = {t: "%.10f" % (s.price_hourly * 0.9) for t, s in catalog.shapes("aws").items() if s.price_hourly}
    usd[HEAD_INSTANCE_TYPES["aws"]] = "%.10f" % (0.1008 * 0.9)
    client, stub = stubbed_pricing(aws_expectations("us-east-1", types, usd))
    monkeypatch.setattr(fetch_aws, "client", lambda session=None: client)
    out = tmp_path / "cache.json"
    status = cli.main(["prices", "fetch", "--cloud", "aws", "--region", "us-east-1", "--out", str(out)])
    stub.assert_no_pending_responses()
    assert status == 1, "p5e.48xlarge has no on-demand price in the recorded answers: a partial fetch says so"
    doc = json.loads(out.read_text())
    assert doc["gpu_cluster_price_cache"] == 1 and doc["updated_at"]
    assert {i["source"].split(" sku ")[0] for i in doc["items"]} == {
        "AWS Price List API GetProducts AmazonEC2", "AWS Price List API GetProducts AmazonS3",
        "AWS Price List API GetProducts AmazonFSx"}
    cost = pricing.price_plan(sample_plan("aws-large"), load_book(None, cache=out))
    assert cost.unpriced == []
    nodes = next(i for i in cost.items if i.item.startswith("GPU nodes"))
    assert nodes.origin == "cache" and nodes.unit_price == pytest.approx(55.04 * 0.9)
    head = next(i for i in cost.items if i.item.startswith("head node"))
    assert head.origin == "cache" and head.unit_price == pytest.approx(0.1008 * 0.9)
    lustre = next(i for i in cost.items if i.item.startswith("FSx"))
    assert lustre.origin == "cache" and lustre.unit_price == 0.34 and not lustre.estimate


def test_prices_fetch_without_credentials_is_bad_input(tmp_path, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("TENCENTCLOUD_SECRET_ID", raising=False)
    out = tmp_path / "cache.json"
    assert cli.main(["prices", "fetch", "--cloud", "aws", "--region", "us-east-1", "--out", str(out)]) == 2
    assert cli.main(["prices", "fetch", "--cloud", "tencentcloud", "--region", "ap-shanghai", "--zone",
                     "ap-shanghai-5", "--image-id", "img-abcdefgh", "--out", str(out)]) == 2
    assert not out.exists()


# ---- Tencent Cloud --------------------------------------------------------------------------------

class Recorded:
    """What requests.Response gives the SDK: status, headers, body."""

    def __init__(self, body: dict):
        self.status_code = 200
        self.headers = {"Content-Type": "application/json"}
        self.content = json.dumps(body)


def tencent_transport(calls: list):
    """A stand-in for ProxyConnection.request answering by the X-TC-Action header, recording each call."""

    def answer(method, url, body=None, headers=None):
        action = headers["X-TC-Action"]
        params = json.loads(body)
        calls.append((action, params))
        rid = f"req-{len(calls)}"
        if action == "InquiryPriceRunInstances":
            if params["InstanceType"].startswith("HCC"):
                return Recorded({"Response": {"Error": {"Code": "InvalidParameterValue.HpcCluster",
                                                        "Message": "HpcClusterId is required"}, "RequestId": rid}})
            hourly = {"GT4.20XLARGE474": 70.0, "GN7.2XLARGE32": 8.5}.get(params["InstanceType"], 30.0)
            return Recorded({"Response": {"Price": {
                "InstancePrice": {"UnitPrice": hourly * 1.25, "ChargeUnit": "HOUR", "UnitPriceDiscount": hourly,
                                  "Discount": 80},
                "BandwidthPrice": {"UnitPrice": 0.8, "ChargeUnit": "GB", "UnitPriceDiscount": 0.8}}, "RequestId": rid}})
        if action == "InquiryPriceCreateDisks":
            per_gb_hour = {"CLOUD_HSSD": 0.0012}.get(params["DiskType"], 0.0005)
            return Recorded({"Response": {"DiskPrice": {"UnitPrice": per_gb_hour * params["DiskSize"] * 1.1,
                                                        "UnitPriceDiscount": per_gb_hour * params["DiskSize"],
                                                        "ChargeUnit": "HOUR"}, "RequestId": rid}})
        if action == "InquiryPriceAllocateAddresses":
            return Recorded({"Response": {"Price": {"AddressPrice": {"UnitPrice": 0.8, "ChargeUnit": "GB"}},
                                          "RequestId": rid}})
        raise AssertionError(f"unexpected action {action}")

    return answer


@pytest.fixture
def tencent_clients():
    calls: list = []
    clients = fetch_tencent.clients("ap-shanghai", "AKIDtest", "testkey")
    for c in clients.values():
        c.request.conn.request = tencent_transport(calls)
    return clients, calls


def test_tencent_fetch_reads_inquiry_answers_and_reports_failures(tencent_clients):
    clients, calls = tencent_clients
    items, problems = fetch_tencent.fetch(clients, "ap-shanghai", "ap-shanghai-5", "img-abcdefgh", "CNY",
                                          ["GT4.20XLARGE474", "HCCPNV6.96XLARGE2304"], NOW,
                                          disk_types=["CLOUD_HSSD", "CLOUD_PREMIUM"])
    got = {(i.item, i.key): i.price for i in items}
    assert got == {("instance", "GT4.20XLARGE474"): 70.0,
                   ("cbs_gb_month", "CLOUD_HSSD"): pytest.approx(0.0012 * 730),
                   ("cbs_gb_month", "CLOUD_PREMIUM"): pytest.approx(0.0005 * 730),
                   ("eip_traffic_gb", "-"): 0.8}
    assert problems[0] == ("tencentcloud instance HCCPNV6.96XLARGE2304 in ap-shanghai-5: InquiryPriceRunInstances "
                           "failed: InvalidParameterValue.HpcCluster: HpcClusterId is required")
    assert "no inquiry API" in problems[-1]
    run = calls[0][1]
    assert run["Placement"] == {"Zone": "ap-shanghai-5"} and run["InstanceChargeType"] == "POSTPAID_BY_HOUR"
    assert [a for a, _ in calls] == ["InquiryPriceRunInstances"] * 2 + ["InquiryPriceCreateDisks"] * 2 + [
        "InquiryPriceAllocateAddresses"]
    node = items[0]
    assert node.currency == "CNY" and "RequestId req-1" in node.source and node.region == "ap-shanghai"


def test_tencent_prices_fetch_command_and_offline_pricing(tmp_path, monkeypatch, tencent_clients, sample_plan):
    clients, calls = tencent_clients
    monkeypatch.setattr(fetch_tencent, "clients", lambda region, *a: clients)
    out = tmp_path / "cache.json"
    status = cli.main(["prices", "fetch", "--cloud", "tencentcloud", "--region", "ap-shanghai", "--zone",
                       "ap-shanghai-5", "--image-id", "img-abcdefgh", "--out", str(out)])
    assert status == 1, "the HCC shapes need an HPC cluster id: their inquiries fail and the command says so"
    cache = PriceCache.load(out)
    assert {i.key for i in cache.doc.items if i.item == "instance"} == {
        t for t in catalog.shapes("tencentcloud") if not t.startswith("HCC")} | {HEAD_INSTANCE_TYPES["tencentcloud"]}
    cost = pricing.price_plan(sample_plan("tencent-mid"), load_book(None, cache=out))
    nodes = [i for i in cost.items if i.item.startswith("GPU nodes")]
    assert [(n.origin, n.unit_price) for n in nodes] == [("cache", 70.0), ("cache", 70.0)]
    # The SDK has no NAT inquiry: the catalog's price of the standard NAT gateway (its public page) still applies.
    assert cost.unpriced == [] and next(i for i in cost.items if i.item.startswith("NAT")).origin == "catalog"
    cfs = next(i for i in cost.items if i.item.startswith("CFS"))
    assert cfs.origin == "catalog", "the SDK has no CFS inquiry: the catalog's CNY price still applies"


def test_a_later_fetch_replaces_only_the_same_items(tmp_path):
    first = PriceCache.empty(tmp_path / "c.json")
    from gpu_cluster.pricebook.cache import CacheItem

    def item(key, price, region="us-east-1"):
        return CacheItem(cloud="aws", item="instance", key=key, region=region, price=price, currency="USD",
                         unit="hour", source="test", fetched_at=NOW)

    merged = first.merged([item("a", 1.0), item("b", 2.0)]).merged([item("a", 3.0), item("a", 4.0, "us-west-2")])
    merged.write()
    again = PriceCache.load(tmp_path / "c.json")
    assert {(i.key, i.region): i.price for i in again.doc.items} == {
        ("a", "us-east-1"): 3.0, ("b", "us-east-1"): 2.0, ("a", "us-west-2"): 4.0}
    assert again.lookup("aws", "instance", "a", "eu-west-1") is None, "a cache never answers for another region"


def test_a_corrupt_cache_is_one_sentence(tmp_path):
    bad = tmp_path / "cache.json"
    bad.write_text(json.dumps({"gpu_cluster_price_cache": 1, "updated_at": "2026-12-01T00:00:00Z",
                               "items": [{"cloud": "aws", "item": "instance", "key": "x", "region": "us-east-1",
                                          "price": True, "currency": "USD", "unit": "hour", "source": "s",
                                          "fetched_at": "2026-12-01T00:00:00Z"}]}))
    from gpu_cluster.errors import UserError

    with pytest.raises(UserError) as e:
        PriceCache.load(bad)
    assert "items[0].price=True: must be a number, not a boolean" in str(e.value)
    assert Path(bad).exists()


def test_a_recorded_answer_with_no_offering_keeps_the_recommender_out_of_that_region(tmp_path, monkeypatch):
    """Where a shape is sold, from the Price List at fetch time: a recorded GetProducts answer with no Linux
    on-demand product of p5.48xlarge in us-east-1 is written to the cache as `not_sold`, and a workload that
    allows us-east-1 and us-west-2 gets p5 only in us-west-2 — the catalog's region list says us-east-1
    sells it, the later answer wins. A later fetch that finds a price takes the record back."""
    from gpu_cluster.pricebook.cache import PriceCache
    from gpu_cluster.recommend import recommend
    from gpu_cluster.workload import parse

    types = ["p5.48xlarge", "g4dn.xlarge"]
    client, stub = stubbed_pricing(aws_expectations("us-east-1", types, {"g4dn.xlarge": "0.5260000000"}))
    not_sold: list = []
    items, problems = fetch_aws.fetch(client, "us-east-1", types, NOW, not_sold)
    stub.assert_no_pending_responses()
    assert [(n.key, n.region) for n in not_sold] == [("p5.48xlarge", "us-east-1")]
    out = tmp_path / "cache.json"
    cache = PriceCache.empty(out).merged(items, not_sold)
    cache.write()
    book = load_book(None, cache=out)
    assert "no on-demand offering in us-east-1" in book.not_sold("aws", "p5.48xlarge", "us-east-1")
    w = parse({"workload": {"name": "placed", "model_params": 7e9, "method": "full", "tokens": 1e9,
                            "budget": {"monthly_limit": 1e9, "currency": "USD"}, "clouds": ["aws"],
                            "regions": {"aws": ["us-east-1", "us-west-2"]}, "multi_node": True}})
    p5 = [c for c in recommend(w, book).candidates if c.shape.type == "p5.48xlarge" and c.purchase != "capacity_block"]
    assert p5 and {c.region for c in p5} == {"us-west-2"}
    assert catalog.sold_in(catalog.shape("aws", "p5.48xlarge"), "us-east-1"), "the catalog alone would say us-east-1"
    # A later answer with a price for it there takes the record back.
    client, stub = stubbed_pricing(aws_expectations("us-east-1", ["p5.48xlarge"], {"p5.48xlarge": "54.0000000000"}))
    again, _ = fetch_aws.fetch(client, "us-east-1", ["p5.48xlarge"], NOW, [])
    assert PriceCache.load(out).merged(again).not_sold("aws", "p5.48xlarge", "us-east-1") is None
