"""Library access control (seed 003 §7): policies (``schemas.library``), the access controller's
decision (:mod:`mother.libraries.access`), redaction (:mod:`mother.libraries.redaction`) and loading
a policy file with its patterns checked (:mod:`mother.libraries.policy`).

Built so far: the policy, the controller's agent / model / justification decision, the redaction
engine. Not built yet: documents and retrieval, the retrieval counters and caps, the audit trail and
its report (``mother library ...`` says so).
"""

from mother.libraries.access import decide
from mother.libraries.policy import load_policy
from mother.libraries.redaction import Redacted, RedactionEngine

__all__ = ["Redacted", "RedactionEngine", "decide", "load_policy"]
