"""A RunSpec checked against the deployment it is submitted to: every model in the catalogue, replies for
every phase on a scripted model, and no scripted fault injection unless the deployment allows it. The client checks early; Mother checks again
at intake (a raw XADD skips the client)."""

from __future__ import annotations

from typing import Any

from mother import keys
from mother.config import Settings
from mother.errors import InvalidSpec
from schemas import RunSpec

__all__ = [
    "check_faults",
    "check_ids",
    "check_libraries",
    "check_models",
    "check_scripts",
    "check_spec",
    "fault_models",
]


def check_spec(settings: Settings, spec: RunSpec) -> None:
    """``InvalidSpec`` (one line: what to change) when the spec asks for what this deployment does not have
    or does not allow: Mother's check at intake."""
    check_ids(spec)
    check_models(settings, spec)
    check_scripts(settings, spec)
    check_faults(settings, spec)


def check_ids(spec: RunSpec) -> None:
    """A run's and its user's ids hold no ``:`` (keys are ``budget:library:run:{run}:{library}``: a run
    named ``a:b`` would share ``a``'s key space, and its attempts' ACL patterns), and a run id of a
    spawned child's shape (``{prefix}.c{8 hex}``) names its parent (the attempt that spawns children may
    write their ledger nodes by that shape, so nobody else's run may have it)."""
    for field, value in (("run_id", spec.run_id), ("user_id", spec.user_id)):
        if value is not None and ":" in value:
            raise InvalidSpec(
                f"{field} {value[:80]!r} holds ':'; ids of runs and users use letters, digits, '_', "
                "'.' and '-'",
                field=field,
            )
    prefix = keys.parent_prefix(spec.run_id) if spec.run_id is not None else None
    if prefix is None:
        return
    if spec.parent_run_id is None or keys.child_prefix(spec.parent_run_id) != prefix:
        raise InvalidSpec(
            f"run_id {spec.run_id!r} has a spawned child's shape ({{parent}}.c and 8 hex digits) "
            f"but {'names no parent_run_id' if spec.parent_run_id is None else f'its parent_run_id is {spec.parent_run_id!r}'}; "
            "pick another run_id",
            field="run_id",
        )


def check_scripts(settings: Settings, spec: RunSpec) -> None:
    """A phase on a scripted model has replies to give: ``scripts`` holds its role (or ``role@model``).
    Without them the phase could only fail, be retried and end ``retries_exhausted``, which names the
    wrong fix. A phase with a ``task`` is let through: a registry tool may do it."""
    for phase in spec.pipeline:
        config = settings.models.get(phase.model)
        if config is None or config.provider != "scripted" or phase.task:
            continue
        if phase.role in spec.scripts or f"{phase.role}@{phase.model}" in spec.scripts:
            continue
        raise InvalidSpec(
            f"phase {phase.name}: role {phase.role!r} runs on the scripted model {phase.model!r} but "
            f"scripts has no {phase.role!r} entry; add scripts.{phase.role} (its replies), or give the "
            "phase a real model",
            field=f"scripts.{phase.role}",
        )


def check_models(settings: Settings, spec: RunSpec) -> None:
    """Every phase's model is in the catalogue (a client checks this early with its own settings)."""
    for phase in spec.pipeline:
        if phase.model not in settings.models:
            known = ", ".join(sorted(settings.models))
            raise InvalidSpec(
                f"phase {phase.name}: model {phase.model!r} is not in the model catalogue; known: {known}"
            )


def fault_models(settings: Settings) -> list[str]:
    """The scripted models that may inject faults (what the leading Mother publishes)."""
    return sorted(
        name for name, m in settings.models.items() if m.provider == "scripted" and m.allow_faults
    )


def check_faults(settings: Settings, spec: RunSpec, allowed: list[str] | None = None) -> None:
    """No scripted reply injects a fault unless a scripted model of the run allows it (Mother's settings
    decide: a client's own cannot switch fault injection on; ``allowed``: the models the leading Mother
    published as allowing it, which a client checks against)."""
    allowing_models = set(fault_models(settings) if allowed is None else allowed)
    for role, replies in spec.scripts.items():
        faulty = next((i for i, reply in enumerate(replies, 1) if reply.fail is not None), None)
        if faulty is None:
            continue
        allowing = [p.model for p in spec.pipeline if p.model in allowing_models]
        if not allowing:
            kind = replies[faulty - 1].fail
            raise InvalidSpec(
                f"scripts.{role}: reply {faulty} injects a fault (fail: {kind}), which this deployment "
                "does not allow: remove it, or enable models.<scripted model>.allow_faults (tests and "
                "demos only: `mother up --dev`)",
                field=f"scripts.{role}",
            )


def check_libraries(client: Any, spec: RunSpec) -> None:
    """Every library the spec names exists (one round trip): InvalidSpec naming the first that does not."""
    if not spec.libraries:
        return
    pipe = client.pipeline(transaction=False)
    for library_id in spec.libraries:
        pipe.sismember(keys.LIBRARIES_INDEX, library_id)
    for library_id, known in zip(spec.libraries, pipe.execute(), strict=True):
        if not known:
            raise InvalidSpec(
                f"library {library_id!r} does not exist; `mother library list` lists them, "
                "`mother library create` makes one",
                field="libraries",
            )
