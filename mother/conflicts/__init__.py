"""Conflict resolution: Mother's review of what agents decide, and what it does when they disagree.

- :mod:`mother.conflicts.detect`: which disagreement a result raises (deterministic rules)
- :mod:`mother.conflicts.engine`: the policy's strategies, applied in order, and their outcome

:func:`install` puts Mother's review hooks on a runtime: human gates' (a tool call that needs approval)
and conflict resolution's.
"""

from mother.conflicts.engine import on_gate_decision, review_hook
from mother.gates.open import review_hook as gate_review_hook
from mother.runtime import Runtime

__all__ = ["install", "on_gate_decision", "review_hook"]


def install(rt: Runtime) -> Runtime:
    """Add Mother's review hooks to ``rt`` (once): the tool-approval gate first, then conflicts."""
    for hook in (gate_review_hook, review_hook):
        if hook not in rt.review_hooks:
            rt.review_hooks.append(hook)
    return rt
