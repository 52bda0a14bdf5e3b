"""The workload file: validated like a stack file — one sentence per problem naming the field, the
value and what is allowed; unknown keys, booleans as numbers and non-finite numbers are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_cluster.errors import UserError
from gpu_cluster.workload import load, parse

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"
SEED = {"name": "zhang-finetune", "model_params": 14e9, "method": "full", "tokens": None, "dataset_gb": 50,
        "epochs": 3, "target_hours": 100, "budget": {"monthly_limit": 100000, "currency": "CNY"},
        "clouds": ["aws", "tencentcloud"], "criticality": "standard", "multi_node": True}


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
    assert str(e.value).startswith(f"workload file {bad}: workload is required")
    bad.write_text("- a\n- b\n")
    with pytest.raises(UserError) as e:
        load(bad)
    assert "must be a mapping with a `workload:` key" in str(e.value)
