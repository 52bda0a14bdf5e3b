"""The workload file: validated like a stack file — one sentence per problem naming the field, the
value and what is allowed; unknown keys, booleans as numbers and non-finite numbers are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_cluster import cli
from gpu_cluster.errors import UserError
from gpu_cluster.workload import WorkloadDoc, load, parse

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "workloads"
DOC = ROOT / "docs" / "workload.md"
SEED = {"name": "zhang-finetune", "model_params": 14e9, "method": "full", "tokens": None, "dataset_gb": 50,
        "epochs": 3, "target_hours": 100, "budget": {"monthly_limit": 100000, "currency": "CNY"},
        "clouds": ["aws", "tencentcloud"], "criticality": "standard", "multi_node": True, "sequence_length": 4096,
        "activation_checkpointing": "auto"}


def problem(**changes) -> str:
    doc = {**SEED, **changes}
    doc = {k: v for k, v in doc.items() if v is not ...}
    with pytest.raises(UserError) as e:
        parse({"workload": doc})
    return str(e.value)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_workload_is_valid(path):
    w = load(path)
    assert w.model_params > 0 and w.clouds


def test_the_issue_seed_reads_14e9_as_a_number():
    text = (EXAMPLES / "startup-seed.yaml").read_text()
    assert "model_params: 14e9" in text and isinstance(yaml.safe_load(text)["workload"]["model_params"], str)
    w = load(EXAMPLES / "startup-seed.yaml")
    assert w.model_params == 14e9 and w.dataset_gb == 50 and w.epochs == 3 and w.multi_node is True


@pytest.mark.parametrize("changes,sentence", [
    ({"model_params": True}, "workload.model_params=True: must be a number, not a boolean"),
    ({"model_params": "lots"}, "workload.model_params='lots': must be a number"),
    ({"model_params": float("nan")}, "workload.model_params=nan: must be a finite number"),
    ({"epochs": float("inf")}, "workload.epochs=inf: must be a finite number"),
    ({"target_hours": -5}, "workload.target_hours=-5: must be above 0"),
    ({"method": "qlora"}, "workload.method='qlora': must be one of 'full', 'lora' or 'pretrain'"),
    ({"multi_node": "yes"}, "workload.multi_node='yes': must be true or false"),
    ({"multi_node": 1}, "workload.multi_node=1: must be true or false"),
    ({"budget": {"monthly_limit": 1000, "currency": "EUR"}}, "workload.budget.currency='EUR': must be one of 'USD' or 'CNY'"),
    ({"budget": {"monthly_limit": False, "currency": "CNY"}}, "workload.budget.monthly_limit=False: must be a number, not a boolean"),
    ({"clouds": ["aws", "aws"]}, "workload.clouds=['aws', 'aws']: lists a cloud twice"),
    ({"regions": {"aws": ["mars-1"]}}, "workload.regions: aws: ['mars-1'] are not aws regions"),
    ({"regions": {"gcp": ["x"]}}, "workload.regions.gcp: unknown key 'gcp'; allowed keys here: aws, tencentcloud"),
    ({"name": "Zhang Finetune"}, "workload.name='Zhang Finetune': does not match"),
    ({"colour": "blue"}, "workload.colour: unknown key 'colour'; allowed keys here: name, model_params"),
    ({"dataset_gb": ...}, "workload: give exactly one of tokens (training tokens per epoch) and dataset_gb"),
    ({"tokens": 1e9}, "workload: give exactly one of tokens"),
    ({"budget": ...}, "workload.budget is required"),
])
def test_bad_values_are_one_sentence_naming_the_field(changes, sentence):
    assert sentence in problem(**changes)


JARGON = ("Input should", "instance of", "Tuple", "dictionary", "NoneType", "valid boolean", "after validation")


@pytest.mark.parametrize("changes", [
    {"model_params": 0}, {"clouds": []}, {"clouds": "aws"}, {"budget": 100000}, {"name": "Startup"},
    {"clouds": ["gcp"]}, {"regions": {"aws": []}}, {"epochs": "two"}, {"multi_node": "yes"},
])
def test_no_message_speaks_library_jargon_and_one_sentence_per_field(changes):
    text = problem(**changes)
    assert not any(j in text for j in JARGON), text
    assert text.count("workload.") == 1, text


def test_regions_only_for_listed_clouds():
    assert "regions names ['tencentcloud'], which clouds=['aws'] leaves out" in problem(
        clouds=["aws"], regions={"tencentcloud": ["ap-shanghai"]})


def test_a_file_without_the_workload_key_is_named(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(UserError) as e:
        load(bad)
    assert str(e.value).startswith(f"{bad}: invalid workload file:\n  - workload is required")
    bad.write_text("- a\n- b\n")
    with pytest.raises(UserError) as e:
        load(bad)
    assert "must be a mapping with a `workload:` key" in str(e.value)


# Every mistake at once (issue "The pull-request gate is a gate", point 5).

MANY_MISTAKES = """\
workload:
  name: Zhang Finetune
  model_params: lots
  method: qlora
  colour: blue
  budget: {monthly_limit: 100000, currency: EUR}
  clouds: [aws]
  regions: {aws: [mars-1], tencentcloud: [ap-shanghai]}
  multi_node: yes
"""


def test_every_mistake_of_a_file_is_reported_in_one_run_exit_2_no_traceback(tmp_path, capsys):
    bad = tmp_path / "w.yaml"
    bad.write_text(MANY_MISTAKES)
    capsys.readouterr()
    assert cli.main(["recommend", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0] == f"error: {bad}: invalid workload file:"
    expected = [
        "workload.name='Zhang Finetune': does not match",
        "workload.model_params='lots': must be a number",
        "workload.method='qlora': must be one of 'full', 'lora' or 'pretrain'",
        "workload.colour: unknown key 'colour'",
        "workload.budget.currency='EUR': must be one of 'USD' or 'CNY'",
        "workload.multi_node='yes': must be true or false",
        # the rules between fields, which pydantic skips once a field is wrong
        "workload: give exactly one of tokens (training tokens per epoch) and dataset_gb (dataset size in GB); "
        "got neither",
        "workload: regions names ['tencentcloud'], which clouds=['aws'] leaves out",
        "workload.regions: aws: ['mars-1'] are not aws regions",
    ]
    for sentence in expected:
        assert sum(line.startswith(f"  - {sentence}") for line in lines[1:]) == 1, (sentence, err)
    assert len(lines) == 1 + len(expected), err


def test_the_rules_between_fields_are_all_reported_when_the_fields_are_valid():
    text = problem(tokens=1e9, clouds=["aws"], regions={"aws": ["mars-1"], "tencentcloud": ["pluto-2"]})
    assert text.startswith("invalid workload file:\n  - ")
    for sentence in ("workload: give exactly one of tokens (training tokens per epoch) and dataset_gb (dataset size "
                     "in GB); got both, tokens=1000000000.0 and dataset_gb=50",
                     "workload: regions names ['tencentcloud'], which clouds=['aws'] leaves out",
                     "workload.regions: aws: ['mars-1'] are not aws regions",
                     "workload.regions: tencentcloud: ['pluto-2'] are not tencentcloud regions"):
        assert f"\n  - {sentence}" in text, text
    assert text.count("\n  - ") == 4, text


# Defaults the user did not write are said, once, on an `assumed:` line.

@pytest.fixture
def catalog_prices(monkeypatch, tmp_path):
    """Price with the catalog alone, as tests/test_recommend.py does."""
    import gpu_cluster.pricebook as prices

    monkeypatch.setattr(prices, "DEFAULT_CACHE", tmp_path / "no-cache.json")
    original = prices.load_book
    monkeypatch.setattr(prices, "load_book", lambda price_file=None, cache=None, usd_cny=None:
                        original(price_file, cache=None, usd_cny=usd_cny))


def _recommend_text(tmp_path, capsys, drop: tuple[str, ...]) -> list[str]:
    w = tmp_path / "w.yaml"
    w.write_text("".join(line + "\n" for line in (EXAMPLES / "lora-7b.yaml").read_text().splitlines()
                         if not any(line.strip().startswith(f"{key}:") for key in drop)))
    capsys.readouterr()
    assert cli.main(["recommend", str(w), "--top", "1"]) in (0, 1)
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("assumed")]


def test_an_omitted_epochs_is_said_to_be_assumed(tmp_path, capsys, catalog_prices):
    assert _recommend_text(tmp_path, capsys, ("epochs",)) == [
        "assumed: epochs=1 (default; set epochs: in the workload)"]


def test_every_omitted_default_is_on_one_assumed_line(tmp_path, capsys, catalog_prices):
    assert _recommend_text(tmp_path, capsys, ("epochs", "criticality", "multi_node")) == [
        "assumed: epochs=1, criticality=standard, multi_node=false "
        "(defaults; set epochs:, criticality:, multi_node: in the workload)"]


def test_nothing_is_assumed_when_every_default_is_written(tmp_path, capsys, catalog_prices):
    assert _recommend_text(tmp_path, capsys, ()) == []


def test_json_names_the_defaults_it_assumed(tmp_path, capsys, catalog_prices):
    import json

    w = tmp_path / "w.yaml"
    w.write_text((EXAMPLES / "lora-7b.yaml").read_text().replace("  epochs: 2\n", ""))
    capsys.readouterr()
    cli.main(["recommend", str(w), "--json"])
    assert json.loads(capsys.readouterr().out)["defaults_assumed"] == {"epochs": 1}
    assert load(EXAMPLES / "lora-7b.yaml").defaulted() == {}
    assert parse({"workload": {k: v for k, v in SEED.items() if k != "epochs"}}).defaulted() == {"epochs": 1}


# docs/workload.md lists every field of the models, and only those, with the code's defaults.

def _model_fields(model, prefix: str = ""):
    """(dotted path, field) of every field of `model` and of the models it nests."""
    from pydantic import BaseModel

    from gpu_cluster.pricebook.validation import _unwrap

    for name, field in model.model_fields.items():
        yield prefix + name, field
        inner = _unwrap(field.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from _model_fields(inner, f"{prefix}{name}.")


def _literals(annotation) -> set[str]:
    import typing

    if typing.get_origin(annotation) is typing.Literal:
        return {str(a) for a in typing.get_args(annotation)}
    return set().union(*(_literals(a) for a in typing.get_args(annotation))) if typing.get_args(annotation) else set()


def _doc_rows() -> dict[str, dict[str, str]]:
    rows, header = {}, None
    for line in DOC.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[0] == "field":
            header = cells
        elif header and cells[0].startswith("`workload"):
            assert len(cells) == len(header), line
            name = cells[0].strip("`")
            assert name not in rows, f"docs/workload.md lists {name} twice"
            rows[name] = dict(zip(header, cells))
    return rows


def _default_cell(field) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value:g}`" if isinstance(value, (int, float)) else f"`{value}`"


def test_the_workload_doc_names_every_field_of_the_model_and_no_other():
    documented = set(_doc_rows())
    fields = {path for path, _ in _model_fields(WorkloadDoc)}
    assert fields - documented == set(), f"fields missing from docs/workload.md: {sorted(fields - documented)}"
    assert documented - fields == set(), f"docs/workload.md names fields the model lacks: {sorted(documented - fields)}"


def test_the_workload_doc_states_the_code_s_defaults_and_allowed_values():
    rows = _doc_rows()
    for path, field in _model_fields(WorkloadDoc):
        row = rows[path]
        assert row["default"] == _default_cell(field), (path, row["default"], _default_cell(field))
        for value in _literals(field.annotation):
            assert f"`{value}`" in row["allowed"], (path, value)
    name = dict(_model_fields(WorkloadDoc))["workload.name"]
    pattern = next(m.pattern for m in name.metadata if getattr(m, "pattern", None))
    assert rows["workload.name"]["allowed"].startswith(f"`{pattern}`")
