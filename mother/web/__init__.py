"""Operator surfaces: the dashboard (:mod:`mother.web.app`), what it reads
(:mod:`mother.web.data`) and the Prometheus metrics (:mod:`mother.web.metrics`). docs/dashboard.md."""

from mother.web.app import check_exposure, create_app

__all__ = ["check_exposure", "create_app"]
