"""CAM documents the Tencent components share (pure: no Pulumi)."""

from __future__ import annotations

import json


def service_role_document(service: str) -> str:
    """Trust policy of a service role: the cloud service `service` (scf.qcloud.com, cvm.qcloud.com) may
    assume it (provider doc cam_role v1.82.42, "Or use service" example; for CVM: CVM documentation,
    "Managing Instance Roles": "The instance only allows the role entity that contains cvm.qcloud.com to
    assume the role").

    No confused-deputy condition, unlike the AWS service roles (components/aws/common.py
    `assume_role_policy`): CAM documents none for a role's trust policy. What was looked for: a `qcs:`
    condition key on the source account (uin) or source resource of a service principal. CAM's general
    condition keys are qcs:current_time, qcs:ip, qcs:resource_tag and qcs:request_tag (CAM documentation,
    "Condition Keys and Condition Operators": tencentcloud.com/document/product/598/58420), none of them
    the caller's account, and the provider's cam_role document examples carry no condition."""
    return json.dumps({"version": "2.0", "statement": [{
        "action": "name/sts:AssumeRole", "effect": "allow", "principal": {"service": [service]}}]})
