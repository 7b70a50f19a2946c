"""Mother's side of the worker hosts: which host runs each job (:mod:`~mother.hosts.table`), the
attempts' liveness marks (:mod:`~mother.hosts.liveness`), and moving a queued job to another host
(:mod:`~mother.hosts.moves`). Hosts are enrolled by an operator (:mod:`mother.identities.hosts`)."""

from mother.hosts.table import HostTable

__all__ = ["HostTable"]
