"""The workload file `gpu-cluster recommend` reads: what is to be trained, by when, for how much.

```yaml
workload:
  name: zhang-finetune
  model_params: 14e9          # parameters
  method: full                # full | lora | pretrain
  tokens: null                # training tokens per epoch; or dataset_gb (+ epochs)
  dataset_gb: 50
  epochs: 3
  target_hours: 100           # optional wall-clock goal
  budget: {monthly_limit: 100000, currency: CNY}
  clouds: [aws, tencentcloud] # allowed clouds; optional regions: {aws: [...], tencentcloud: [...]}
  criticality: standard
  multi_node: true
  usd_cny: 7.1                # optional: the exchange rate to compare currencies with
```

Validated like stack files: unknown keys and bad values are errors, one sentence each naming the
field, the value and what is allowed; booleans are not numbers; NaN and infinity are refused. Every
problem of a file is reported at once, as one `UserError` listing them all (`PATH: invalid workload
file:` then `  - ...` per problem), cross-field rules included even when a field is also wrong.
Training tokens = (tokens, or dataset_gb × 10⁹ / bytes-per-token) × epochs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, StrictBool, StrictInt, ValidationError, field_validator, model_validator

from components import catalog
from components.messages import essential, kind_of
from gpu_cluster.errors import UserError
from gpu_cluster.files import load_yaml
from gpu_cluster.pricebook.validation import Number, Strict, describe, short

Method = Literal["full", "lora", "pretrain"]
CloudName = Literal["aws", "tencentcloud"]


class WorkloadBudget(Strict):
    monthly_limit: Number = Field(gt=0, description="the most the training may cost in one month, in `currency`")
    currency: Literal["USD", "CNY"] = Field(description="USD or CNY")


class Regions(Strict):
    aws: Optional[tuple[str, ...]] = Field(default=None, min_length=1, description="AWS regions to consider, e.g. [us-east-1]")
    tencentcloud: Optional[tuple[str, ...]] = Field(default=None, min_length=1,
                                                    description="Tencent Cloud regions to consider, e.g. [ap-shanghai]")

    @model_validator(mode="after")
    def _known(self) -> "Regions":
        found = _unknown_regions({"aws": self.aws, "tencentcloud": self.tencentcloud})
        if found:
            raise ValueError("; ".join(found))
        return self


def _unknown_regions(regions: Any) -> list[str]:
    """One sentence per cloud whose region list names regions the catalog does not know."""
    out = []
    from components.clouds import profile

    for name in catalog.CLOUDS:
        names = regions.get(name) if isinstance(regions, dict) else None
        bad = [r for r in names if isinstance(r, str) and r not in catalog.regions(name)] \
            if isinstance(names, (list, tuple)) else []
        if bad:
            out.append(f"{name}: {bad} are not {name} regions; allowed: e.g. "
                       f"{', '.join(profile(name).region_examples)}")
    return out


def _cross_field(w: Any) -> list[str]:
    """The rules between fields of a workload mapping (raw or validated), one sentence each."""
    if not isinstance(w, dict):
        return []
    out = []
    tokens, dataset_gb = w.get("tokens"), w.get("dataset_gb")
    if (tokens is None) == (dataset_gb is None):
        out.append("give exactly one of tokens (training tokens per epoch) and dataset_gb (dataset size in GB); "
                   + ("got neither" if tokens is None else
                      f"got both, tokens={short(tokens)} and dataset_gb={short(dataset_gb)}"))
    regions, clouds = w.get("regions"), w.get("clouds")
    if isinstance(regions, dict) and isinstance(clouds, (list, tuple)):
        extra = [c for c in catalog.CLOUDS if regions.get(c) and c not in clouds]
        if extra:
            out.append(f"regions names {extra}, which clouds={list(clouds)} leaves out; allowed: "
                       f"regions only for the listed clouds")
    return out


class Workload(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,23}$",
                      description="[a-z][a-z0-9-]{1,23}; becomes the cluster name of the stack it writes")
    model_params: Number = Field(gt=0, description="the model's parameter count, e.g. 7e9")
    method: Method = Field(description="full (full fine-tune), lora (LoRA adapters on frozen weights), pretrain")
    tokens: Optional[Number] = Field(default=None, gt=0, description="training tokens per epoch, e.g. 1e9; or give dataset_gb")
    dataset_gb: Optional[Number] = Field(default=None, gt=0, description="dataset size in GB (10⁹ bytes) of text; or give tokens")
    epochs: Number = Field(default=1, gt=0, description="passes over the data (default 1)")
    sequence_length: StrictInt = Field(default=4096, ge=128, le=1_048_576,
                                       description="tokens per training sample (default 4096): sets the activation memory")
    activation_checkpointing: Literal["auto", "on", "off"] = Field(
        default="auto", description="on: keep only each layer's input and recompute the rest in the backward pass "
        "(one more forward pass of compute, far less activation memory); off: keep every activation; auto (default): "
        "off where the activations fit, on where they do not")
    target_hours: Optional[Number] = Field(default=None, gt=0, description="wall-clock goal for the whole run, hours")
    budget: WorkloadBudget = Field(description="monthly_limit and currency")
    clouds: tuple[CloudName, ...] = Field(min_length=1, description="a list of aws and/or tencentcloud")
    regions: Optional[Regions] = Field(default=None, description="per cloud, the regions to consider")
    criticality: Literal["critical", "standard", "experimental"] = Field(
        default="standard", description="critical (on-demand only), standard, experimental")
    multi_node: StrictBool = Field(default=False, description="true or false: may the run span several nodes")
    usd_cny: Optional[Number] = Field(default=None, gt=0, description="CNY per USD to compare currencies with, e.g. 7.1")

    @field_validator("clouds")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"lists a cloud twice: {list(v)}; allowed: each of aws, tencentcloud at most once")
        return v

    @model_validator(mode="after")
    def _data(self) -> "Workload":
        found = _cross_field({**dict(self), "regions": dict(self.regions) if self.regions else None})
        if found:
            raise ValueError("; ".join(found))
        return self

    def regions_of(self, cloud: str) -> Optional[tuple[str, ...]]:
        return getattr(self.regions, cloud) if self.regions else None

    def defaulted(self) -> dict[str, Any]:
        """The fields the file left out that have a default value the recommender uses (epochs,
        criticality, multi_node), with that value; the optional fields whose absence means "none"
        (tokens, dataset_gb, target_hours, regions, usd_cny) are not defaults and are left out."""
        return {name: getattr(self, name) for name, field in type(self).model_fields.items()
                if not field.is_required() and field.default is not None and name not in self.model_fields_set}


class WorkloadDoc(Strict):
    workload: Workload = Field(description="name, model_params, method, tokens or dataset_gb, epochs, target_hours, "
                                           "budget, clouds, regions, criticality, multi_node, usd_cny")


def parse(doc: Any, where: Optional[str] = None) -> Workload:
    """The validated workload of a parsed document, or one UserError listing every problem.

    pydantic reports every field's problem in one pass, but runs the rules between fields (exactly one
    of tokens and dataset_gb, regions only for listed clouds, known region names) only when every
    field is valid, and then stops at the first: on any failure they are checked again here on the
    raw mapping, so a file with several mistakes is answered with all of them in one run.
    """
    head = f"{where}: invalid workload file:" if where else "invalid workload file:"
    if not isinstance(doc, dict):
        raise UserError(f"{head}\n  - the file must be a mapping with a `workload:` key, got {kind_of(doc)}")
    try:
        return WorkloadDoc.model_validate(doc).workload
    except ValidationError as e:
        rule_locs = {("workload",), ("workload", "regions")}
        fields = [err for err in essential(e.errors())
                  if not (err["type"] == "value_error" and tuple(err["loc"]) in rule_locs)]
        found = [describe(WorkloadDoc, "", err).lstrip(".") for err in fields]
        raw = doc.get("workload")
        found += [f"workload: {p}" for p in _cross_field(raw)]
        if isinstance(raw, dict):
            found += [f"workload.regions: {p}" for p in _unknown_regions(raw.get("regions"))]
        raise UserError(head + "".join(f"\n  - {p}" for p in found)) from None


def load(path: Path) -> Workload:
    return parse(load_yaml(Path(path), "workload file"), str(path))
