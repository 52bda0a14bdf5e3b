"""Price sources: the example price file covers every item of the sample stacks; precedence price file →
cache → catalog; discounts; the stack config key; the report naming each line's source; and the
price file's validation (one sentence naming the field)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import yaml

from components import catalog
from conftest import stack_with
from gpu_cluster import cli, pricing
from gpu_cluster.errors import UserError
from gpu_cluster.pricebook import catalog_book, load_book
from gpu_cluster.pricebook.cache import CacheItem, PriceCache
from gpu_cluster.render import SAMPLE_STACKS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "prices.example.yaml"


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_the_example_price_file_leaves_no_sample_item_unpriced(sample_plan, stack):
    cost = pricing.price_plan(sample_plan(stack), load_book(EXAMPLE, cache=None))
    assert cost.unpriced == []
    assert cost.items and all(i.origin == "price file" and i.as_of == "2026-12-01" for i in cost.items)
    assert all(i.unit_price is not None and i.origin == "price file" for i in cost.usage_based)
    assert cost.by_origin() == {"price file": cost.total}


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_without_a_price_file_only_honestly_unpriced_items_remain(sample_plan, stack):
    """Catalog only: what stays unpriced is exactly what no public source prices (instances.yaml and
    prices.yaml rows with price null), never an item the catalog has a price for."""
    cost = pricing.price_plan(sample_plan(stack), catalog_book())
    for item in cost.unpriced:
        cloud, kind, key, _, region = item.lookup.split(" ")
        if kind == "instance":
            # A GPU shape the catalog has no price for, or a shape it does not carry (the Slurm head
            # node's) with a prices.yaml row saying no public price was found.
            shape = catalog.shape(cloud, key)
            from gpu_cluster.pricebook.catalog import entry
            row = entry(cloud, "instance", key)
            if shape is not None:
                assert shape.price_hourly is None and row is None, item.lookup
            else:
                assert row is not None and row["price"] is None, item.lookup
        else:
            from gpu_cluster.pricebook.catalog import entry
            row = entry(cloud, kind, key)
            assert row is None or row["price"] is None, item.lookup
    assert all(i.origin == "catalog" for i in cost.items if i.monthly is not None)
    assert all(i.origin == "" and i.monthly is None and i.unit_price is None for i in cost.unpriced)


def write_cache(path: Path, price: float) -> Path:
    now = datetime.datetime(2026, 11, 30, 12, tzinfo=datetime.timezone.utc)
    PriceCache.empty(path).merged([CacheItem(cloud="aws", item="instance", key="p5.48xlarge", region="us-east-1",
                                             price=price, currency="USD", unit="hour", source="test answer",
                                             fetched_at=now)]).write()
    return path


def test_precedence_price_file_then_cache_then_catalog(tmp_path, sample_plan):
    cache = write_cache(tmp_path / "cache.json", 50.0)
    plan = sample_plan("aws-large")

    def node_line(book):
        return next(i for i in pricing.price_plan(plan, book).items if i.item.startswith("GPU nodes"))

    assert (node_line(catalog_book()).origin, node_line(catalog_book()).unit_price) == ("catalog", 55.04)
    from_cache = node_line(load_book(None, cache=cache))
    assert (from_cache.origin, from_cache.unit_price, from_cache.as_of) == ("cache", 50.0, "2026-11-30")
    from_file = node_line(load_book(EXAMPLE, cache=cache))
    assert (from_file.origin, from_file.unit_price) == ("price file", 44.0)


def test_a_discount_applies_to_lower_precedence_prices_only(tmp_path, sample_plan):
    pf = tmp_path / "p.yaml"
    pf.write_text(yaml.safe_dump({"price_file": {
        "name": "edp", "as_of": "2026-12-01", "source": "test agreement",
        "discounts": [{"cloud": "aws", "items": ["instance"], "percent": 10}],
        "prices": [{"cloud": "aws", "item": "ebs_gb_month", "key": "gp3", "price": 0.07, "currency": "USD"}]}}))
    cost = pricing.price_plan(sample_plan("aws-large"), load_book(pf, cache=None))
    node = next(i for i in cost.items if i.item.startswith("GPU nodes"))
    assert node.origin == "catalog" and node.unit_price == pytest.approx(55.04 * 0.9)
    assert "10 % negotiated discount" in node.note
    disk = next(i for i in cost.items if i.item.startswith("EBS"))
    assert (disk.origin, disk.unit_price) == ("price file", 0.07)


def test_a_cache_priced_for_one_region_does_not_price_another(tmp_path, sample_plan):
    cache = write_cache(tmp_path / "cache.json", 50.0)
    plan = sample_plan("aws-entry")  # us-west-2
    cost = pricing.price_plan(plan, load_book(None, cache=cache))
    assert {i.origin for i in cost.items} == {"catalog"}


def test_the_stack_config_key_selects_a_price_file_and_the_report_names_sources(tmp_path):
    from gpu_cluster.plan import Plan
    from gpu_cluster.render import render
    from gpu_cluster.report import build_report

    sf = stack_with("tencent-large", config={"gpu-cluster:prices": "../examples/prices.example.yaml"})
    rendered = render(sf)
    plan = Plan.from_doc(rendered.plan())
    report = build_report(rendered, plan, stack_file=sf)
    cost = report["monthly_cost"]
    assert cost["unpriced"] == [] and set(cost["by_origin"]) == {"price file"}
    assert cost["price_sources"][0].startswith("price file: ")
    assert all(i["origin"] == "price file" and i["source"] and i["as_of"] for i in cost["items"])
    catalog_only = build_report(rendered, plan, prices=None, stack_file=stack_with("tencent-large"))
    assert {i["item"] for i in catalog_only["monthly_cost"]["unpriced"]} == {"GPU nodes 1 × HCCPNV6.96XLARGE2304",
                                                                            "head node 1 × S5.LARGE8"}


def test_plan_prices_option_writes_reports_priced_by_the_file(tmp_path):
    out = tmp_path / "plans"
    assert cli.main(["plan", "--stack", "tencent-mid", "--prices", str(EXAMPLE), "--out", str(out)]) == 0
    report = json.loads((out / "tencent-mid.report.json").read_text())
    assert report["monthly_cost"]["unpriced"] == []
    # Two GT4 nodes, their disks, Turbo, the NAT gateway, and the Slurm head node (S5.LARGE8, its 50 GB system and
    # 20 GB state disks).
    assert report["monthly_cost"]["total"] == pytest.approx(2 * 80 * 730 + 1.0 * (2 * 200 + 2 * 1000 + 2 * 1000)
                                                             + 1.2 * 20480 + 0.6 * 730 + 0.9 * 730 + 1.0 * (50 + 20),
                                                             abs=0.5)


def test_a_missing_price_file_is_bad_input(tmp_path):
    assert cli.main(["plan", "--stack", "aws-entry", "--prices", str(tmp_path / "nope.yaml"),
                     "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize("row,sentence", [
    ({"cloud": "aws", "item": "gpu", "key": "x", "price": 1, "currency": "USD"}, "price_file.prices[0].item='gpu'"),
    ({"cloud": "aws", "item": "instance", "key": "x", "price": True, "currency": "USD"},
     "price_file.prices[0].price=True: must be a number, not a boolean"),
    ({"cloud": "aws", "item": "instance", "key": "x", "price": -1, "currency": "USD"},
     "price_file.prices[0].price=-1: must be at least 0"),
    ({"cloud": "aws", "item": "instance", "key": "x", "price": 1, "currency": "EUR"},
     "price_file.prices[0].currency='EUR': must be one of 'USD' or 'CNY'"),
    ({"cloud": "aws", "item": "instance", "key": "x", "price": 1, "currency": "USD", "region": "ap-shanghai"},
     "region='ap-shanghai' is not a aws region"),
    ({"cloud": "aws", "item": "instance", "key": "x", "price": 1, "currency": "USD", "discount": 3},
     "price_file.prices[0].discount: unknown key 'discount'; allowed keys here: cloud, item, key, region"),
])
def test_price_file_errors_are_one_sentence_naming_the_field(tmp_path, row, sentence):
    pf = tmp_path / "p.yaml"
    pf.write_text(yaml.safe_dump({"price_file": {"name": "n", "as_of": "2026-12-01", "source": "s", "prices": [row]}}))
    with pytest.raises(UserError) as e:
        load_book(pf, cache=None)
    assert str(e.value).startswith(f"price file {pf}: ") and sentence in str(e.value)


def test_a_price_given_twice_is_refused(tmp_path):
    row = {"cloud": "aws", "item": "instance", "key": "x", "price": 1, "currency": "USD"}
    pf = tmp_path / "p.yaml"
    pf.write_text(yaml.safe_dump({"price_file": {"name": "n", "as_of": "2026-12-01", "source": "s",
                                                 "prices": [row, dict(row, price=2)]}}))
    with pytest.raises(UserError) as e:
        load_book(pf, cache=None)
    assert "price_file.prices[1] repeats price_file.prices[0]" in str(e.value)


def test_every_catalog_price_names_its_source_and_date():
    for cloud in catalog.CLOUDS:
        for name, row in catalog.prices(cloud).items():
            entries = [row] if isinstance(row, dict) and "price" in row else (
                list(row.values()) if isinstance(row, dict) else [])
            for e in entries:
                if isinstance(e, dict) and "price" in e:
                    assert e["source"] and e["as_of"], (cloud, name)
                    assert e["price"] is None or e["price"] > 0, (cloud, name)


def test_gpus_catalog_rows_are_sourced_and_cover_every_catalogued_gpu():
    gpus = catalog.read("gpus.yaml")
    used = {s.gpu for c in catalog.CLOUDS for s in catalog.shapes(c).values()}
    assert used <= set(gpus)
    for name, row in gpus.items():
        assert row["peak_dense_tflops"] > 0 and row["memory_gib"] > 0 and row["precision"] in ("bf16", "fp16")
        assert row["source"] and isinstance(row["as_of"], datetime.date), name
    assert gpus["H100"]["peak_dense_tflops"] == pytest.approx(1979 / 2, abs=0.2), "dense = half the sparse figure"
