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
field, the value and what is allowed; booleans are not numbers; NaN and infinity are refused.
Training tokens = (tokens, or dataset_gb × 10⁹ / bytes-per-token) × epochs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, StrictBool, ValidationError, field_validator, model_validator

from components import catalog
from components.messages import kind_of
from gpu_cluster.errors import UserError
from gpu_cluster.files import load_yaml
from gpu_cluster.prices.validation import Number, Strict, problems

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
        for cloud in ("aws", "tencentcloud"):
            bad = [r for r in (getattr(self, cloud) or ()) if r not in catalog.regions(cloud)]
            if bad:
                raise ValueError(f"{cloud}: {bad} are not {cloud} regions; allowed: e.g. "
                                 f"{'us-east-1, us-west-2' if cloud == 'aws' else 'ap-shanghai, ap-guangzhou'}")
        return self


class Workload(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,23}$",
                      description="[a-z][a-z0-9-]{1,23}; becomes the cluster name of the stack it writes")
    model_params: Number = Field(gt=0, description="the model's parameter count, e.g. 7e9")
    method: Method = Field(description="full (full fine-tune), lora (LoRA adapters on frozen weights), pretrain")
    tokens: Optional[Number] = Field(default=None, gt=0, description="training tokens per epoch, e.g. 1e9; or give dataset_gb")
    dataset_gb: Optional[Number] = Field(default=None, gt=0, description="dataset size in GB (10⁹ bytes) of text; or give tokens")
    epochs: Number = Field(default=1, gt=0, description="passes over the data (default 1)")
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
        if (self.tokens is None) == (self.dataset_gb is None):
            raise ValueError("give exactly one of tokens (training tokens per epoch) and dataset_gb (dataset size "
                             f"in GB); got tokens={self.tokens!r}, dataset_gb={self.dataset_gb!r}")
        if self.regions is not None:
            extra = [c for c in ("aws", "tencentcloud") if getattr(self.regions, c) and c not in self.clouds]
            if extra:
                raise ValueError(f"regions names {extra}, which clouds={list(self.clouds)} leaves out; allowed: "
                                 f"regions only for the listed clouds")
        return self

    def regions_of(self, cloud: str) -> Optional[tuple[str, ...]]:
        return getattr(self.regions, cloud) if self.regions else None


class WorkloadDoc(Strict):
    workload: Workload = Field(description="name, model_params, method, tokens or dataset_gb, epochs, target_hours, "
                                           "budget, clouds, regions, criticality, multi_node, usd_cny")


def parse(doc: Any, where: str = "workload file") -> Workload:
    """The validated workload of a parsed document, or one UserError listing every problem."""
    if not isinstance(doc, dict):
        raise UserError(f"{where} must be a mapping with a `workload:` key, got {kind_of(doc)}")
    try:
        return WorkloadDoc.model_validate(doc).workload
    except ValidationError as e:
        found = [p.lstrip(".") for p in problems(WorkloadDoc, "", e)]
        raise UserError(f"{where}: " + "; ".join(found)) from None


def load(path: Path) -> Workload:
    return parse(load_yaml(Path(path), "workload file"), f"workload file {path}")
