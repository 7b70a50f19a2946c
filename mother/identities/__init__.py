"""Identities: every party but Mother is an enrolled identity, its own Redis ACL user, writing only its
own streams. Principals (who submit and decide, :mod:`~mother.identities.principals`) and worker hosts
(who run phases, tool jobs and the GC, :mod:`~mother.identities.hosts`), their ACL rules
(:mod:`~mother.identities.rules`), made again wherever the server lost them
(:mod:`~mother.identities.reapply`), who a connection is (:mod:`~mother.identities.who`), and the
streams Mother reads them by (:mod:`~mother.identities.streams`)."""

from mother.identities import hosts, principals
from mother.identities.enroll import new_password, party_url, persist
from mother.identities.reapply import Reapplied, acl_file, reapply
from mother.identities.rules import COMMAND_GRANTS, RESERVED, host_rules, principal_rules
from mother.identities.streams import ConsumedStreams, Source

__all__ = [
    "COMMAND_GRANTS",
    "RESERVED",
    "ConsumedStreams",
    "Reapplied",
    "Source",
    "acl_file",
    "host_rules",
    "hosts",
    "new_password",
    "party_url",
    "persist",
    "principal_rules",
    "principals",
    "reapply",
]
