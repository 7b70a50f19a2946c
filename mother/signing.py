"""Signed definitions (the SafetyHarness's verification): Ed25519 signatures over role files, verified before use.

``mother keys generate`` writes ``signing.key`` (PEM, private, 0600) and
``signing.pub`` (base64 raw public key). ``mother sign FILE`` writes ``FILE.sig``
(JSON: alg, key_id, signature over the file's bytes). With
``harness.require_signatures: true`` a role file that is unsigned, altered after
signing, or signed by a key not in ``harness.trusted_keys`` blocks the run at load
(``policyViolation``) with an error naming the file. Uses the ``cryptography`` package.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mother.errors import SignatureInvalid

__all__ = ["generate_keypair", "key_id", "sign_file", "signature_path", "verify_file"]


def signature_path(path: Path) -> Path:
    return path.with_name(path.name + ".sig")


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


def generate_keypair(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / "signing.key", directory / "signing.pub"
    if private.exists():
        raise SignatureInvalid(
            f"{private} already exists; keep it or move it away before generating a new key"
        )
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    public.write_text(base64.b64encode(_raw_public(key.public_key())).decode() + "\n")
    return private, public


def _load_private(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise SignatureInvalid(
            f"{path}: cannot read the signing key ({exc}); create one with `mother keys generate`"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureInvalid(f"{path} is not an Ed25519 key")
    return key


def sign_file(path: Path, private_key: Path) -> Path:
    key = _load_private(private_key)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SignatureInvalid(f"cannot read {path}: {exc.strerror}") from None
    sig = {
        "alg": "ed25519",
        "key_id": key_id(_raw_public(key.public_key())),
        "signature": base64.b64encode(key.sign(data)).decode(),
    }
    target = signature_path(path)
    target.write_bytes(orjson.dumps(sig, option=orjson.OPT_INDENT_2) + b"\n")
    return target


def _trusted(keys: list[Path]) -> dict[str, Ed25519PublicKey]:
    found = {}
    for path in keys:
        try:
            raw = base64.b64decode(Path(path).expanduser().read_text().strip(), validate=True)
            found[key_id(raw)] = Ed25519PublicKey.from_public_bytes(raw)
        except (OSError, ValueError) as exc:
            raise SignatureInvalid(
                f"trusted key {path} cannot be read ({exc}); it must hold a base64 Ed25519 public key"
            ) from None
    return found


def verify_file(path: Path, trusted_keys: list[Path]) -> str:
    """Check ``path`` against ``path.sig``; returns the signer's key id or raises SignatureInvalid."""
    sig_file = signature_path(path)
    if not sig_file.is_file():
        raise SignatureInvalid(
            f"{path} is not signed (no {sig_file.name}); sign it with `mother sign {path}`"
        )
    try:
        sig = orjson.loads(sig_file.read_bytes())
        signature = base64.b64decode(sig["signature"], validate=True)
        kid = str(sig["key_id"])
    except (orjson.JSONDecodeError, KeyError, ValueError, TypeError):
        raise SignatureInvalid(
            f"{sig_file} is not a valid signature file; sign {path} again"
        ) from None
    keys = _trusted(trusted_keys)
    if kid not in keys:
        raise SignatureInvalid(
            f"{path} is signed by key {kid}, which is not in harness.trusted_keys"
        )
    try:
        keys[kid].verify(signature, path.read_bytes())
    except InvalidSignature:
        raise SignatureInvalid(
            f"{path} does not match its signature: it was altered after signing"
        ) from None
    return kid
