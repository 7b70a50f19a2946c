"""Libraries (seed 003 §7): policies (``schemas.library``), the access controller's decision
(:mod:`mother.libraries.access`), redaction (:mod:`mother.libraries.redaction`), policy files with
their patterns checked (:mod:`mother.libraries.policy`), documents (:mod:`mother.libraries.ingest`),
retrieval under policy with caps and audit (:mod:`mother.libraries.retrieval`), a phase's
``retrieval_hits``, approvals and contradictions (:mod:`mother.libraries.context`) and the access
report (:mod:`mother.libraries.report`). docs/libraries.md.
"""

from mother.libraries.access import decide
from mother.libraries.policy import load_policy
from mother.libraries.redaction import Redacted, RedactionEngine

__all__ = ["Redacted", "RedactionEngine", "decide", "load_policy"]
