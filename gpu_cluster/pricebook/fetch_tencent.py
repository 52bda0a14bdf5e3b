"""Fetch Tencent Cloud prices through its inquiry APIs (tencentcloud-sdk-python).

| item | API (SDK client) | request | price kept |
| --- | --- | --- | --- |
| instance | CVM InquiryPriceRunInstances (cvm 2017-03-12) | Placement.Zone, ImageId, POSTPAID_BY_HOUR, InstanceType, a 50 GB CLOUD_PREMIUM system disk | Price.InstancePrice.UnitPriceDiscount (else UnitPrice), ChargeUnit HOUR |
| cbs_gb_month | CBS InquiryPriceCreateDisks (cbs 2017-03-12) | DiskType, POSTPAID_BY_HOUR, DiskSize 1000 | DiskPrice.UnitPriceDiscount (else UnitPrice) / 1000 GB × 730 h |
| eip_traffic_gb | VPC InquiryPriceAllocateAddresses (vpc 2017-03-12) | TRAFFIC_POSTPAID_BY_HOUR, 100 Mbps | Price.AddressPrice.UnitPrice (else DiscountPrice), per GB |

Not fetchable: CFS Turbo and NAT gateways — the SDK's cfs (3.1.189) and vpc (3.1.193) modules have no
price inquiry for them (checked: no *Price* action on CfsClient; none for NAT gateways on VpcClient);
their catalog prices or a price file cover them.

The APIs answer in the account's billing currency (China site: CNY, international site: USD), which
the response does not state: `currency` records what the caller says the account uses. An instance
price may include the inquiry's 50 GB system disk (the API prices the whole configuration); the note
on each cached item says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from components.run_windows import HOURS_PER_MONTH
from gpu_cluster.pricebook import NO_KEY
from gpu_cluster.pricebook.cache import CacheItem

DISK_PROBE_GB = 1000
DISK_TYPES = ("CLOUD_PREMIUM", "CLOUD_BSSD", "CLOUD_SSD", "CLOUD_HSSD", "CLOUD_TSSD")


def _discounted(price: Any) -> Optional[float]:
    if price is None:
        return None
    for name in ("UnitPriceDiscount", "UnitPrice", "DiscountPrice"):
        value = getattr(price, name, None)
        if value is not None:
            return float(value)
    return None


def fetch(clients: dict[str, Any], region: str, zone: str, image_id: str, currency: str,
          instance_types: Iterable[str], fetched_at: Any,
          disk_types: Iterable[str] = DISK_TYPES) -> tuple[list[CacheItem], list[str]]:
    """Cache items for `region` (instances quoted in `zone`), and one sentence per failed item."""
    from tencentcloud.cbs.v20170312 import models as cbs_models
    from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
    from tencentcloud.cvm.v20170312 import models as cvm_models
    from tencentcloud.vpc.v20170312 import models as vpc_models

    quotes = _Quotes(region=region, currency=currency, fetched_at=fetched_at)
    for itype in instance_types:
        _quote_instance(quotes, clients, zone, image_id, itype, cvm_models, TencentCloudSDKException)
    for dtype in disk_types:
        _quote_disk(quotes, clients, dtype, cbs_models, TencentCloudSDKException)
    _quote_eip(quotes, clients, vpc_models, TencentCloudSDKException)
    quotes.problems.append(f"tencentcloud CFS Turbo and NAT gateway in {region}: no inquiry API in the SDK; "
                           f"priced from the catalog or a price file")
    return quotes.items, quotes.problems


@dataclass
class _Quotes:
    """What `fetch` has so far: the cache items of `region` and one sentence per failed item."""
    region: str
    currency: str
    fetched_at: Any
    items: list[CacheItem] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def keep(self, item: str, key: str, unit: str, value: float, source: str, note: str = "") -> None:
        self.items.append(CacheItem(cloud="tencentcloud", item=item, key=key, region=self.region,
                                    price=round(value, 8), currency=self.currency, unit=unit, source=source,
                                    fetched_at=self.fetched_at, note=note))


def _quote_instance(quotes: _Quotes, clients: dict[str, Any], zone: str, image_id: str, itype: str,
                    cvm_models: Any, sdk_error: type[Exception]) -> None:
    """The hourly price of one instance type, quoted in `zone` (CVM InquiryPriceRunInstances)."""
    req = cvm_models.InquiryPriceRunInstancesRequest()
    req.from_json_string(json.dumps({
        "Placement": {"Zone": zone}, "ImageId": image_id, "InstanceChargeType": "POSTPAID_BY_HOUR",
        "InstanceType": itype, "SystemDisk": {"DiskType": "CLOUD_PREMIUM", "DiskSize": 50}, "InstanceCount": 1}))
    try:
        resp = clients["cvm"].InquiryPriceRunInstances(req)
    except sdk_error as e:
        quotes.problems.append(f"tencentcloud instance {itype} in {zone}: InquiryPriceRunInstances failed: "
                               f"{e.get_code()}: {e.get_message()}")
        return
    price = resp.Price.InstancePrice if resp.Price else None
    value = _discounted(price)
    unit = getattr(price, "ChargeUnit", None)
    if value is None or unit != "HOUR":
        quotes.problems.append(f"tencentcloud instance {itype} in {zone}: InquiryPriceRunInstances gave no hourly "
                               f"price (ChargeUnit {unit!r})")
        return
    quotes.keep("instance", itype, "hour", value,
                f"Tencent CVM InquiryPriceRunInstances {zone} POSTPAID_BY_HOUR RequestId {resp.RequestId}",
                note=f"quoted in {zone}, with a 50 GB CLOUD_PREMIUM system disk")


def _quote_disk(quotes: _Quotes, clients: dict[str, Any], dtype: str, cbs_models: Any,
                sdk_error: type[Exception]) -> None:
    """The GB-month price of one CBS disk type (CBS InquiryPriceCreateDisks)."""
    region = quotes.region
    req = cbs_models.InquiryPriceCreateDisksRequest()
    req.from_json_string(json.dumps({"DiskType": dtype, "DiskChargeType": "POSTPAID_BY_HOUR",
                                     "DiskSize": DISK_PROBE_GB, "DiskCount": 1}))
    try:
        resp = clients["cbs"].InquiryPriceCreateDisks(req)
    except sdk_error as e:
        quotes.problems.append(f"tencentcloud CBS {dtype} in {region}: InquiryPriceCreateDisks failed: "
                               f"{e.get_code()}: {e.get_message()}")
        return
    value = _discounted(resp.DiskPrice)
    if value is None or getattr(resp.DiskPrice, "ChargeUnit", None) != "HOUR":
        quotes.problems.append(f"tencentcloud CBS {dtype} in {region}: InquiryPriceCreateDisks gave no hourly price")
        return
    quotes.keep("cbs_gb_month", dtype, "GB-month", value / DISK_PROBE_GB * HOURS_PER_MONTH,
                f"Tencent CBS InquiryPriceCreateDisks {region} {dtype} POSTPAID_BY_HOUR {DISK_PROBE_GB} GB "
                f"RequestId {resp.RequestId}", note=f"{value:g} per hour for {DISK_PROBE_GB} GB, × 730 h")


def _quote_eip(quotes: _Quotes, clients: dict[str, Any], vpc_models: Any, sdk_error: type[Exception]) -> None:
    """The per-GB price of EIP traffic (VPC InquiryPriceAllocateAddresses)."""
    region = quotes.region
    req = vpc_models.InquiryPriceAllocateAddressesRequest()
    req.from_json_string(json.dumps({"InternetChargeType": "TRAFFIC_POSTPAID_BY_HOUR", "InternetMaxBandwidthOut": 100}))
    try:
        resp = clients["vpc"].InquiryPriceAllocateAddresses(req)
        detail = resp.Price.AddressPrice if resp.Price else None
        value = None if detail is None else (detail.UnitPrice if detail.UnitPrice is not None else detail.DiscountPrice)
        if value is None:
            quotes.problems.append(f"tencentcloud EIP traffic in {region}: InquiryPriceAllocateAddresses gave no unit price")
        else:
            quotes.keep("eip_traffic_gb", NO_KEY, "GB", float(value),
                        f"Tencent VPC InquiryPriceAllocateAddresses {region} TRAFFIC_POSTPAID_BY_HOUR RequestId {resp.RequestId}",
                        note=f"ChargeUnit {detail.ChargeUnit}")
    except sdk_error as e:
        quotes.problems.append(f"tencentcloud EIP traffic in {region}: InquiryPriceAllocateAddresses failed: "
                               f"{e.get_code()}: {e.get_message()}")


def clients(region: str, secret_id: Optional[str] = None, secret_key: Optional[str] = None) -> dict[str, Any]:
    """CVM, CBS and VPC clients for `region`, signed with TENCENTCLOUD_SECRET_ID / _KEY."""
    from tencentcloud.cbs.v20170312 import cbs_client
    from tencentcloud.common import credential
    from tencentcloud.cvm.v20170312 import cvm_client
    from tencentcloud.vpc.v20170312 import vpc_client

    from gpu_cluster.errors import UserError

    secret_id = secret_id or os.environ.get("TENCENTCLOUD_SECRET_ID")
    secret_key = secret_key or os.environ.get("TENCENTCLOUD_SECRET_KEY")
    if not secret_id or not secret_key:
        raise UserError("no Tencent Cloud credentials found: set TENCENTCLOUD_SECRET_ID and TENCENTCLOUD_SECRET_KEY "
                        "(the provider's variables), then run `gpu-cluster prices fetch --cloud tencentcloud` again")
    cred = credential.Credential(secret_id, secret_key)
    return {"cvm": cvm_client.CvmClient(cred, region), "cbs": cbs_client.CbsClient(cred, region),
            "vpc": vpc_client.VpcClient(cred, region)}
