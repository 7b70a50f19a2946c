"""Principals: who submits, approves, answers, cancels and operates, proven by the Redis ACL user each
one is (:mod:`mother.principals.acl`, :mod:`mother.principals.registry`), and the streams Mother reads
them by (:mod:`mother.principals.streams`)."""

from mother.principals.acl import COMMAND_GRANTS, RESERVED, rules
from mother.principals.registry import add, load, load_all, names, persist, reapply, remove, rotate
from mother.principals.streams import ConsumedStreams, Source

__all__ = [
    "COMMAND_GRANTS",
    "RESERVED",
    "ConsumedStreams",
    "Source",
    "add",
    "load",
    "load_all",
    "names",
    "persist",
    "reapply",
    "remove",
    "rotate",
    "rules",
]
