"""The routing table: what the shipped tools' patterns do with the spec's example phrasings and the ones
people write, each with the tool it must go to (and what it must extract), or the model. Requests that
say not to do something, ask for something to be written or fixed, or ask a question about a tool's
subject ("Explain how pytest fixtures work") are the model's; a request whose
file the router cannot find is the model's too (the tool would have nothing to run on)."""

from __future__ import annotations

from typing import Any

import pytest

from mother.config import Settings
from mother.tools import ToolRouter, build_registry, load_manifests

MODEL = "model"

# (task, role, expected tool or MODEL, inputs the route must carry)
TABLE: list[tuple[str, str, str, dict[str, Any]]] = [
    # the spec's patterns, as people phrase them
    ("git status", "coder", "git_status", {"repo_path": "."}),
    ("check the git repository", "coder", "git_status", {}),
    ("what changed in the repo since yesterday?", "coder", "git_status", {}),
    (
        "resize image logo.png to 200x100",
        "vision",
        "resize_image",
        {"input_path": "logo.png", "width": 200, "height": 100},
    ),
    (
        "resize the image banner.jpg to 1024x768 pixels",
        "vision",
        "resize_image",
        {"input_path": "banner.jpg", "width": 1024},
    ),
    (
        "scale image photo.png to 640x480",
        "vision",
        "resize_image",
        {"input_path": "photo.png", "height": 480},
    ),
    ("run the tests", "coder", "run_tests", {}),
    ("execute the test suite", "coder", "run_tests", {}),
    ("npm test", "coder", "run_tests", {"test_command": "npm test"}),
    ("pytest", "coder", "run_tests", {}),
    ("extract text from image scan.png", "vision", "ocr_extract", {"image_path": "scan.png"}),
    ("ocr receipt.jpg", "vision", "ocr_extract", {"image_path": "receipt.jpg"}),
    ("read text from scan.png", "vision", "ocr_extract", {"image_path": "scan.png"}),
    # tests, said many ways
    ("run the tests with pytest", "coder", "run_tests", {"test_command": "pytest"}),
    (
        "run the unit tests with python -m unittest",
        "coder",
        "run_tests",
        {"test_command": "python -m unittest"},
    ),
    ("Run the tests with jest", "coder", "run_tests", {"test_command": "jest"}),
    ("please run npm test and report failures", "coder", "run_tests", {"test_command": "npm test"}),
    ("run npm run test", "coder", "run_tests", {"test_command": "npm run test"}),
    ("yarn test", "coder", "run_tests", {"test_command": "yarn test"}),
    ("execute mocha", "coder", "run_tests", {"test_command": "mocha"}),
    ("can you run the tests in the api folder", "coder", "run_tests", {}),
    ("run all tests again", "coder", "run_tests", {}),
    ("Execute the full test suite now.", "coder", "run_tests", {}),
    ("run pytest on the repo", "coder", "run_tests", {"test_command": "pytest"}),
    ("npx jest", "coder", "run_tests", {"test_command": "npx jest"}),
    ("run the tests without coverage", "coder", "run_tests", {}),
    # git, said many ways
    ("show me git status", "coder", "git_status", {}),
    ("check git for uncommitted changes", "coder", "git_status", {}),
    ("what changed in this repo", "coder", "git_status", {}),
    ("Git status of the repository, please", "coder", "git_status", {}),
    # images
    (
        "resize hero.webp to 300 by 200",
        "vision",
        "resize_image",
        {"input_path": "hero.webp", "width": 300, "height": 200},
    ),
    (
        "shrink thumbnail.png to 64x64",
        "vision",
        "resize_image",
        {"input_path": "thumbnail.png", "width": 64},
    ),
    (
        "resize to 800x600 the picture at assets/cover.jpeg",
        "vision",
        "resize_image",
        {"input_path": "assets/cover.jpeg", "width": 800},
    ),
    (
        "extract the text in the image invoices/march.tiff",
        "vision",
        "ocr_extract",
        {"image_path": "invoices/march.tiff"},
    ),
    (
        "transcribe the text of whiteboard.jpg",
        "vision",
        "ocr_extract",
        {"image_path": "whiteboard.jpg"},
    ),
    ("get the text from screenshot.png", "vision", "ocr_extract", {"image_path": "screenshot.png"}),
    (
        "OCR scans/page-1.png in English",
        "vision",
        "ocr_extract",
        {"image_path": "scans/page-1.png"},
    ),
    (
        "render text 'HELLO' into an image hello.png",
        "vision",
        "render_text",
        {"text": "HELLO", "output_path": "hello.png"},
    ),
    (
        'render the text "INVOICE 42" to image card.png',
        "coder",
        "render_text",
        {"output_path": "card.png"},
    ),
    # no tool request: negations
    ("do not run the tests", "coder", MODEL, {}),
    ("Don't run the tests yet, just read the code", "coder", MODEL, {}),
    ("review the change without running the test suite", "coder", MODEL, {}),
    ("never resize image logo.png to 10x10", "vision", MODEL, {}),
    ("no need to run pytest, explain the failure", "coder", MODEL, {}),
    ("skip the tests and summarise the diff", "coder", MODEL, {}),
    ("instead of running the tests, reason about the code", "coder", MODEL, {}),
    # no tool request: write or change something
    ("write a helper script that can run the tests", "coder", MODEL, {}),
    ("fix the failing tests", "coder", MODEL, {}),
    ("Add an add() function with a test, then run the tests.", "coder", MODEL, {}),
    ("create a test suite for the parser", "coder", MODEL, {}),
    ("implement git status parsing in Python", "coder", MODEL, {}),
    ("write code that resizes image a.png to 10x10", "vision", MODEL, {}),
    ("refactor the OCR module", "vision", MODEL, {}),
    ("update the tests so they pass", "coder", MODEL, {}),
    ("please write unit tests for the cache", "coder", MODEL, {}),
    # no tool request: a question about a tool's subject
    ("Explain how pytest fixtures work", "coder", MODEL, {}),
    ("what is a pytest fixture?", "coder", MODEL, {}),
    ("How do I run the tests with npm?", "coder", MODEL, {}),
    ("describe what git status shows", "coder", MODEL, {}),
    ("Why does OCR of receipt.jpg fail on blurry scans?", "vision", MODEL, {}),
    ("Tell me about resize image logo.png to 200x100 options", "vision", MODEL, {}),
    # a question, then told to do it: the tool
    ("How flaky is the suite? Run the tests.", "coder", "run_tests", {}),
    ("what changed in the repo today?", "coder", "git_status", {}),
    # the tool would have nothing to run on: the model
    ("resize the image to 300x300", "vision", MODEL, {}),
    ("scale image by half", "vision", MODEL, {}),
    ("read text from the attached photo", "vision", MODEL, {}),
    ("do OCR on the receipt", "vision", MODEL, {}),
    # no tool at all
    ("summarise the design document", "coder", MODEL, {}),
    ("plan the database migration", "coder", MODEL, {}),
    ("explain why the build is slow", "coder", MODEL, {}),
    ("translate the README to German", "coder", MODEL, {}),
    ("which tests are flaky? look at the history", "coder", MODEL, {}),
    # a role the tool is not for
    ("run the tests", "planner", MODEL, {}),
    ("ocr receipt.jpg", "coder", MODEL, {}),
]


@pytest.fixture(scope="module")
def router() -> ToolRouter:
    cfg = Settings()
    return ToolRouter(build_registry(cfg, load_manifests(cfg), "2026-11-27T00:00:00.000Z"))


def test_the_table_has_every_kind_of_row() -> None:
    assert len(TABLE) >= 60
    assert len({task for task, *_ in TABLE}) >= len(TABLE) - 2
    assert sum(expected == MODEL for _, _, expected, _ in TABLE) >= 20


@pytest.mark.parametrize(("task", "role", "expected", "inputs"), TABLE, ids=[t for t, *_ in TABLE])
def test_routing_table(
    router: ToolRouter, task: str, role: str, expected: str, inputs: dict[str, Any]
) -> None:
    routed = router.route(task, role)
    got = routed.candidates[0].tool_id if routed.candidates else MODEL
    assert got == expected, (task, routed.passed_over)
    if routed.candidates:
        carried = routed.candidates[0].inputs
        assert {k: carried.get(k) for k in inputs} == inputs, carried
