"""``principal:{name}``: a person or service Mother knows by its own Redis ACL user. What it may do is
its grants; whom it may submit for, itself and its ``acts_for`` users. No I/O."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from schemas._base import Id, Record, Timestamp

__all__ = ["GRANTS", "Grant", "Principal"]

Grant = Literal["submit", "approve", "answer", "cancel", "operate", "inspect"]
GRANTS: tuple[Grant, ...] = ("submit", "approve", "answer", "cancel", "operate", "inspect")
# every user: a service that submits for all its end users (mother up --dev's `dev`)
ANY_USER = "*"


class Principal(Record):
    """A principal: its name (its ACL user's), its grants, and the users it may submit for besides
    itself."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]
    grants: list[Grant] = Field(min_length=1)
    acts_for: list[Annotated[str, StringConstraints(pattern=r"^(\*|[A-Za-z0-9_.:-]{1,128})$")]] = (
        Field(default_factory=list, max_length=1000)
    )
    created_at: Timestamp
    rotated_at: Timestamp | None = None
    password_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        None,
        description="SHA-256 of its password (never the password): what Mother makes its ACL user "
        "again with (ACL SETUSER #digest) after a restart or a failover, which keep no ACL user",
    )

    def may(self, grant: str) -> bool:
        return grant in self.grants

    def submits_for(self, user_id: Id) -> bool:
        """Whether a run of ``user_id`` may come from this principal: its own, or one it acts for."""
        return user_id == self.name or ANY_USER in self.acts_for or user_id in self.acts_for
