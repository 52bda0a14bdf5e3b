"""CAM documents the Tencent components share (pure: no Pulumi)."""

from __future__ import annotations

import json


def service_role_document(service: str) -> str:
    """Trust policy of a service role: the cloud service `service` (scf.qcloud.com, cvm.qcloud.com) may
    assume it (provider doc cam_role v1.82.42, "Or use service" example; for CVM: CVM documentation,
    "Managing Instance Roles": "The instance only allows the role entity that contains cvm.qcloud.com to
    assume the role")."""
    return json.dumps({"version": "2.0", "statement": [{
        "action": "name/sts:AssumeRole", "effect": "allow", "principal": {"service": [service]}}]})
