"""The step journal: every model call and tool call of a phase attempt is a step Mother records in the
guard call that charges or settles it (``journal:{run_id}:{phase_index}``, :mod:`schemas.journal`), and a
new attempt of the phase replays what was done (``workers/resume.py``). Here: a host's step checked
before it is recorded (:func:`check_step`) and the lane a phase attempt's steps go under (:func:`lane_of`)."""

from mother.journal.steps import check_step, lane_of

__all__ = ["check_step", "lane_of"]
