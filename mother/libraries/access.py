"""The library access controller's decision (seed 003 §7, LibraryAccessController.checkAccess), for the
checks that need no counter: the agent, the model, the justification. The rate limits are counters,
checked on the server with the retrieval's charge (``mh_library_take``, :mod:`mother.libraries.retrieval`).

- agent: a role in ``denied_agents`` (or ``*`` there) is refused, whatever ``allowed_agents`` says;
  else it must be in ``allowed_agents`` or ``*`` be;
- model: a cloud model (the catalogue's ``cloud`` flag, not a part of its name) is refused when
  ``cloud_models_allowed`` is off; a model named in ``denied_models`` is refused (``*`` there refuses
  every cloud model); else it must be in ``allowed_models`` or ``*`` be;
- justification: with ``audit.require_justification`` an empty one is refused (``noJustification``).
"""

from __future__ import annotations

from schemas.library import AccessDecision, LibraryAccessPolicy

__all__ = ["agent_allowed", "decide", "model_allowed"]


def agent_allowed(policy: LibraryAccessPolicy, role: str) -> bool:
    if role in policy.denied_agents or "*" in policy.denied_agents:
        return False
    return "*" in policy.allowed_agents or role in policy.allowed_agents


def model_allowed(policy: LibraryAccessPolicy, model: str, *, cloud: bool) -> bool:
    if cloud and not policy.cloud_models_allowed:
        return False
    if model in policy.denied_models or (cloud and "*" in policy.denied_models):
        return False
    return "*" in policy.allowed_models or model in policy.allowed_models


def decide(
    policy: LibraryAccessPolicy,
    *,
    role: str,
    model: str,
    cloud: bool,
    justification: str | None = None,
) -> AccessDecision:
    library = policy.library_id
    if not agent_allowed(policy, role):
        return AccessDecision(
            allowed=False,
            reason="policyViolation",
            details=f"Agent '{role}' not allowed to access library {library}",
        )
    if not model_allowed(policy, model, cloud=cloud):
        why = (
            " (a cloud model; cloud_models_allowed is off)"
            if cloud and not policy.cloud_models_allowed
            else ""
        )
        return AccessDecision(
            allowed=False,
            reason="policyViolation",
            details=f"Model '{model}' not allowed on library {library}{why}",
        )
    if policy.audit.require_justification and not (justification or "").strip():
        return AccessDecision(
            allowed=False,
            reason="noJustification",
            details=f"Library {library} requires a justification (the RunSpec's or the tool call's)",
        )
    return AccessDecision(allowed=True, policy_applied=library)
