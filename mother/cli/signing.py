"""``mother keys generate``, ``mother sign FILE``, ``mother verify FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mother.cli._common import console, handle_errors, settings
from mother.signing import generate_keypair, sign_file, verify_file

__all__ = ["keys_app", "sign", "verify"]

keys_app = typer.Typer(help="Ed25519 keys for signing role files.", no_args_is_help=True)


@keys_app.command("generate")
@handle_errors
def generate(
    directory: Annotated[
        Path, typer.Option("--dir", help="where to write signing.key / signing.pub")
    ] = Path(".mother/keys"),
) -> None:
    """Create an Ed25519 key pair (the private key is written 0600)."""
    private, public = generate_keypair(directory)
    console.print(
        f"private key: {private}\npublic key:  {public}  (add it to harness.trusted_keys)"
    )


@handle_errors
def sign(
    file: Annotated[Path, typer.Argument(help="the file to sign (e.g. roles/coder.yaml)")],
    key: Annotated[Path, typer.Option(help="private key")] = Path(".mother/keys/signing.key"),
) -> None:
    """Sign FILE with an Ed25519 key; writes FILE.sig next to it."""
    console.print(f"signed: {sign_file(file, key)}")


@handle_errors
def verify(file: Annotated[Path, typer.Argument()]) -> None:
    """Verify FILE against FILE.sig and harness.trusted_keys."""
    cfg = settings()
    console.print(
        f"{file}: valid signature by key {verify_file(file, list(cfg.harness.trusted_keys))}"
    )
