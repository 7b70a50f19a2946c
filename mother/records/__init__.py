"""The records layer: every JSON document the product reads or writes, one module per family, each the
owner of its keys' paths. The documents' schemas are in ``schemas``; the server functions that write
them are in ``mother/lua``.

- :mod:`mother.records.runs`: ``run:{id}``
- :mod:`mother.records.budgets`: ``budget:run:{id}``, ``limits:run:{id}``, ``budget:user:…``,
  ``budget:global``, ``mother:config``
- :mod:`mother.records.results`: ``result:{id}``, ``termination:{id}``
- :mod:`mother.records.rejections`: ``rejection:{entry}``, ``rejections``, ``rejections:by_run``
- :mod:`mother.records.artifacts`: ``artifact:{id}``, ``artifact_meta:{id}``
- :mod:`mother.records.conflicts`: ``conflict:{id}`` (and ``idx:conflict``)
- :mod:`mother.records.metrics`: ``metrics:counters`` (what Mother counts with a move)

The spend ledger (``ledger:{id}``) is :mod:`mother.ledger`'s, the composed contexts
(``context:{run}:{i}``) :mod:`mother.context`'s.
"""

from mother.records._json import path_values
from mother.records.runs import POSITION_PATHS, parse_position, parse_run_record

__all__ = ["POSITION_PATHS", "parse_position", "parse_run_record", "path_values"]
