"""Signed role files: keys, sign, verify from the CLI; a tampered or unsigned file blocks the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mother.errors import SignatureInvalid
from mother.signing import generate_keypair, sign_file, verify_file
from tests.conftest import run_cli, start_pipeline, stop_pipeline
from tests.test_pipeline import example


def test_cli_generate_sign_verify_and_tamper(tmp_path: Path) -> None:
    """`mother keys generate`, `mother sign`, `mother verify`; an altered file is refused naming it."""
    env = {"MOTHER_HARNESS__TRUSTED_KEYS": json.dumps([str(tmp_path / "k" / "signing.pub")])}
    assert run_cli("keys", "generate", "--dir", str(tmp_path / "k"), env=env).returncode == 0
    assert oct((tmp_path / "k" / "signing.key").stat().st_mode & 0o777) == "0o600"
    role = tmp_path / "coder.yaml"
    role.write_text("max_tool_calls: 5\n")
    assert (
        run_cli("sign", str(role), "--key", str(tmp_path / "k" / "signing.key"), env=env).returncode
        == 0
    )
    ok = run_cli("verify", str(role), env=env)
    assert ok.returncode == 0 and "valid signature by key" in ok.stdout
    role.write_text("max_tool_calls: 500\n")
    bad = run_cli("verify", str(role), env=env)
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        == f"error[signature_invalid]: {role} does not match its signature: it was altered after signing"
    )


def test_unsigned_and_untrusted(tmp_path: Path) -> None:
    """No .sig, or a signature by a key that is not trusted, is refused with the file named."""
    _, mine = generate_keypair(tmp_path / "mine")
    other_private, _ = generate_keypair(tmp_path / "other")
    role = tmp_path / "r.yaml"
    role.write_text("{}\n")
    with pytest.raises(SignatureInvalid, match=f"^{role} is not signed"):
        verify_file(role, [mine])
    sign_file(role, other_private)
    with pytest.raises(SignatureInvalid, match=r"which is not in harness\.trusted_keys"):
        verify_file(role, [mine])


def test_required_signatures_gate_runs(tmp_path: Path) -> None:
    """With require_signatures a signed role runs; after tampering the next run ends policyViolation naming the file."""
    private, public = generate_keypair(tmp_path / "keys")
    roles = tmp_path / "roles"
    roles.mkdir()
    role = roles / "writer.yaml"
    role.write_text("max_tool_calls: 5\n")
    sign_file(role, private)
    env = {
        "MOTHER_HARNESS__ROLES_DIR": str(roles),
        "MOTHER_HARNESS__REQUIRE_SIGNATURES": "true",
        "MOTHER_HARNESS__TRUSTED_KEYS": json.dumps([str(public)]),
    }
    p = start_pipeline(tmp_path, workers=1, env=env)
    try:
        spec = lambda: example("worker-killed", scripts={"writer": [{"text": "written"}]})  # noqa: E731
        good = p.wait(p.client.submit(spec())).termination
        unsigned = example("worker-killed", scripts={"stranger": [{"text": "x"}]})
        unsigned["pipeline"][0]["role"] = "stranger"
        no_file = p.wait(p.client.submit(unsigned)).termination
        role.write_text("max_tool_calls: 500\n")
        bad = p.wait(p.client.submit(spec())).termination
    finally:
        stop_pipeline(p)
    assert good.reason == "success"
    assert bad.reason == "policyViolation"
    assert (
        bad.details
        == f"role writer: {role} does not match its signature: it was altered after signing"
    )
    # a role with no file would run unsigned with default permissions
    assert no_file.reason == "policyViolation"
    assert no_file.details.startswith(
        f"role stranger: no signed role file for role stranger in {roles / 'stranger.yaml'}"
    )


def test_tool_with_altered_manifest_is_blocked_before_execution(tmp_path: Path) -> None:
    """With require_signatures and tool manifests, an altered write_file manifest blocks the tool (the model is told)."""
    private, public = generate_keypair(tmp_path / "keys")
    manifests = tmp_path / "tools"
    manifests.mkdir()
    for name in ("read_file", "list_dir", "write_file", "spawn_run"):
        (manifests / f"{name}.yaml").write_text(f"name: {name}\n")
        sign_file(manifests / f"{name}.yaml", private)
    # altered after signing
    (manifests / "write_file.yaml").write_text("name: write_file\nread_only: true\n")
    roles = tmp_path / "roles"
    roles.mkdir()
    (roles / "writer.yaml").write_text("max_tool_calls: 5\n")
    sign_file(roles / "writer.yaml", private)
    env = {
        "MOTHER_HARNESS__TOOL_MANIFESTS_DIR": str(manifests),
        "MOTHER_HARNESS__REQUIRE_SIGNATURES": "true",
        "MOTHER_HARNESS__ROLES_DIR": str(roles),
        "MOTHER_HARNESS__TRUSTED_KEYS": json.dumps([str(public)]),
    }
    p = start_pipeline(tmp_path, workers=1, env=env)
    try:
        spec = example(
            "worker-killed",
            scripts={
                "writer": [
                    {
                        "tool_calls": [
                            {"name": "list_dir", "arguments": {}},
                            {"name": "write_file", "arguments": {"path": "a", "content": "b"}},
                        ]
                    },
                    {"text": "done"},
                ]
            },
        )
        run_id = p.client.submit(spec)
        envelope = p.wait(run_id)
        blocked = [
            f
            for _, f in p.redis.xrange("activity")
            if f["type"] == "tool_blocked" and f.get("run_id") == run_id
        ]
    finally:
        stop_pipeline(p)
    assert envelope.termination.reason == "success"
    assert not (tmp_path / "workspaces" / run_id / "a").exists()
    assert (
        len(blocked) == 1 and "write_file.yaml does not match its signature" in blocked[0]["data"]
    )
