"""The gpu-cluster-guardrails policy pack: `pulumi preview --policy-pack policies`.

Only assembles the pack; the rules live in gpu_guardrails/ (the offline runner imports them from there).
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from gpu_guardrails import ALL_POLICIES, PACK_DESCRIPTION, PACK_NAME

PolicyPack(
    name=PACK_NAME,
    policies=ALL_POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description=PACK_DESCRIPTION,
    display_name="GPU cluster guardrails",
)
