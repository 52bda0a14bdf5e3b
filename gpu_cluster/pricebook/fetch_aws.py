"""Fetch AWS list prices through the Price List Query API (boto3 `pricing`, GetProducts).

One GetProducts query per item, filtered to the region by `regionCode`:

| item | ServiceCode | filters (TERM_MATCH) | price dimension kept |
| --- | --- | --- | --- |
| instance | AmazonEC2 | instanceType, operatingSystem=Linux, tenancy=Shared, preInstalledSw=NA, capacitystatus=Used, licenseModel=No License required | OnDemand, unit Hrs |
| ebs_gb_month gp3 | AmazonEC2 | productFamily=Storage, volumeApiName=gp3 | OnDemand, unit GB-Mo |
| nat_gateway_hour | AmazonEC2 | productFamily=NAT Gateway | OnDemand, unit Hrs, usagetype *NatGateway-Hours |
| s3_gb_month STANDARD | AmazonS3 | storageClass=General Purpose, volumeType=Standard | OnDemand, unit GB-Mo, first tier (beginRange 0) |
| fsx_lustre_gb_month 125/250/500/1000 | AmazonFSx | fileSystemType=Lustre, storageType=SSD | products whose deploymentOption reads Persistent 2 and throughputCapacity the class; unit GB-Mo |

The response shape (PriceList of JSON strings with product.attributes and terms.OnDemand.*.
priceDimensions.*.pricePerUnit.USD) is the one the AWS CLI documents for `aws pricing get-products`
(aws-cli awscli/examples/pricing/get-products.rst). The FSx attribute names deploymentOption and
throughputCapacity were not confirmed against a live response: when no product matches, the class is
reported as not found and stays out of the cache — never guessed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Optional

from gpu_cluster.pricebook import NO_KEY
from gpu_cluster.pricebook.cache import CacheItem, NotSold

PRICING_ENDPOINT_REGION = "us-east-1"
"""The Price List Query API answers from us-east-1 (also eu-central-1, ap-south-1)."""

FSX_CLASSES = ("125", "250", "500", "1000")


def _tm(field: str, value: str) -> dict:
    return {"Type": "TERM_MATCH", "Field": field, "Value": value}


def _products(client: Any, service: str, filters: list[dict]) -> list[dict]:
    out, token = [], None
    while True:
        kwargs = {"ServiceCode": service, "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}
        if token:
            kwargs["NextToken"] = token
        resp = client.get_products(**kwargs)
        out += [json.loads(p) if isinstance(p, str) else p for p in resp.get("PriceList", [])]
        token = resp.get("NextToken")
        if not token:
            return out


def _on_demand(product: dict, unit: str, pick: Optional[Callable[[dict], bool]] = None) -> Optional[tuple[float, dict]]:
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if dim.get("unit") != unit or usd is None or (pick and not pick(dim)):
                continue
            value = float(usd)
            if value > 0:
                return value, dim
    return None


def _source(service: str, product: dict, dim: dict) -> str:
    sku = product.get("product", {}).get("sku", "?")
    pub = product.get("publicationDate") or product.get("version") or "?"
    return (f"AWS Price List API GetProducts {service} sku {sku} rate {dim.get('rateCode', '?')} "
            f"(published {pub}): {dim.get('description', '').strip()}")


def fetch(client: Any, region: str, instance_types: Iterable[str], fetched_at: Any,
          not_sold: Optional[list[NotSold]] = None) -> tuple[list[CacheItem], list[str]]:
    """Cache items for `region`, and one sentence per item that could not be fetched. An instance type the
    Price List has no Linux on-demand product of in `region` (an answer, not a failed call) is added to
    `not_sold`: the recommender then never places it there."""
    items: list[CacheItem] = []
    problems: list[str] = []

    def keep(item: str, key: str, unit: str, value: float, source: str, note: str = "") -> None:
        items.append(CacheItem(cloud="aws", item=item, key=key, region=region, price=value, currency="USD",
                               unit=unit, source=source, fetched_at=fetched_at, note=note))

    def first(service: str, filters: list[dict], unit: str, what: str,
              match: Optional[Callable[[dict], bool]] = None, pick: Optional[Callable[[dict], bool]] = None):
        try:
            products = _products(client, service, filters)
        except Exception as e:  # botocore ClientError / EndpointConnectionError: one item fails, not the fetch
            problems.append(f"aws {what} in {region}: GetProducts failed: {e}")
            return None
        for product in products:
            if match and not match(product.get("product", {}).get("attributes", {})):
                continue
            found = _on_demand(product, unit, pick)
            if found:
                return found[0], _source(service, product, found[1])
        problems.append(f"aws {what} in {region}: the Price List API returned no on-demand price "
                        f"({len(products)} product(s) matched the filters)")
        return None

    region_f = _tm("regionCode", region)
    for itype in instance_types:
        filters = [region_f, _tm("instanceType", itype), _tm("operatingSystem", "Linux"), _tm("tenancy", "Shared"),
                   _tm("preInstalledSw", "NA"), _tm("capacitystatus", "Used"),
                   _tm("licenseModel", "No License required")]
        got = first("AmazonEC2", filters, "Hrs", f"instance {itype}")
        if got:
            keep("instance", itype, "hour", *got)
        elif not_sold is not None and problems[-1].endswith("(0 product(s) matched the filters)"):
            not_sold.append(NotSold(cloud="aws", key=itype, region=region, fetched_at=fetched_at,
                                    source="AWS Price List API GetProducts AmazonEC2 (Linux, shared tenancy)"))
    got = first("AmazonEC2", [region_f, _tm("productFamily", "Storage"), _tm("volumeApiName", "gp3")],
                "GB-Mo", "EBS gp3")
    if got:
        keep("ebs_gb_month", "gp3", "GB-month", *got)
    got = first("AmazonEC2", [region_f, _tm("productFamily", "NAT Gateway")], "Hrs", "NAT gateway hour",
                match=lambda a: str(a.get("usagetype", "")).endswith("NatGateway-Hours"))
    if got:
        keep("nat_gateway_hour", NO_KEY, "hour", *got, note="data processed billed by use")
    got = first("AmazonS3", [region_f, _tm("storageClass", "General Purpose"), _tm("volumeType", "Standard")],
                "GB-Mo", "S3 Standard storage", pick=lambda d: str(d.get("beginRange")) == "0")
    if got:
        keep("s3_gb_month", "STANDARD", "GB-month", *got, note="first tier")
    for tput in FSX_CLASSES:
        got = first("AmazonFSx", [region_f, _tm("fileSystemType", "Lustre"), _tm("storageType", "SSD")], "GB-Mo",
                    f"FSx for Lustre PERSISTENT_2 {tput} MB/s/TiB",
                    match=lambda a, t=tput: _persistent2(a.get("deploymentOption")) and
                    str(a.get("throughputCapacity", "")).strip() == t)
        if got:
            keep("fsx_lustre_gb_month", tput, "GB-month", *got)
    return items, problems


def _persistent2(option: Any) -> bool:
    return re.sub(r"[^a-z0-9]", "", str(option or "").lower()) == "persistent2"


def client(session: Any = None) -> Any:
    """A `pricing` client on the default credential chain; UserError when there are no credentials."""
    import boto3

    from gpu_cluster.errors import UserError

    session = session or boto3.Session()
    if session.get_credentials() is None:
        raise UserError("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
                        "then run `gpu-cluster prices fetch --cloud aws` again (the Price List API needs a signed "
                        "request; pricing:GetProducts permission)")
    return session.client("pricing", region_name=PRICING_ENDPOINT_REGION)
