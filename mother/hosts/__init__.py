"""Mother-addressed dispatch: which worker host runs each phase attempt.

Every worker host (``mother worker``, one pool) shares the ``worker`` ACL user, so nothing on the server
told the worker that dequeued a phase job from one that only said it did: any holder of the worker
credentials could take a queued attempt's token first. Now each host registers (:mod:`workers.host`): it
pushes a random id and the SHA-256 of a password it keeps on ``hosts:hello`` (``RPUSH`` is all the shared
user may do there), and the leading Mother makes it an ACL user of its own, ``host:{id}``, with the
``worker`` user's rules plus two of its own: ``GETDEL`` on ``host_token:{id}:*`` and ``SET`` on its line
``hosts:alive:{id}`` (:mod:`mother.hosts.registry`). At each dispatch Mother chooses a live host
(:class:`mother.hosts.table.HostTable`), queues the job on that host's own queues (``agents.{id}``,
``tools.{id}``) and puts the token at ``host_token:{id}:{run}:{i}:{a}``, which no other credentials read.
With no host live the job waits on ``awaiting_host`` (no worker listens there) with its token in Mother's
own key, until the watchdog moves it to a host (``mh_readdress``: the same attempt, with its token); so
is a job waiting on a host that is gone, on one with no worker free while another has one, or on one
that does not take its jobs.
"""

from __future__ import annotations

from mother.hosts.registry import Hello, check, look
from mother.hosts.table import HostTable

__all__ = ["Hello", "HostTable", "check", "look"]
