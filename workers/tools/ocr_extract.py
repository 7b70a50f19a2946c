"""``ocr_extract``: the text in an image of the run's workspace, read by RapidOCR on ONNX Runtime. Its
detection and recognition models ship inside the ``rapidocr`` package, so nothing is downloaded and no
system package (tesseract) is needed. ``language``: eng/en and ch/chi_sim use the same bundled
Chinese-English models."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mother.errors import ToolError
from workers.tools.files import inside

__all__ = ["engine", "run"]


@functools.cache
def engine() -> Any:
    """The OCR engine (loaded once per process: about a second)."""
    try:
        from rapidocr import RapidOCR
    except ImportError as exc:
        raise ToolError(
            f"the OCR engine is not installed on this worker ({exc}): it is the ocr extra, "
            "pip install 'mother-harness[ocr]'"
        ) from None
    return RapidOCR(params={"Global.log_level": "error"})


def run(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    source = inside(workspace, inputs.get("image_path"), "image_path")
    if not source.is_file():
        raise ToolError(f"no image {inputs.get('image_path')!r} in the workspace")
    try:
        result = engine()(str(source))
    except Exception as exc:  # noqa: BLE001
        raise ToolError(
            f"OCR failed on {inputs.get('image_path')!r}: {type(exc).__name__}: {exc}"
        ) from None
    texts = [str(t) for t in (result.txts or ())]
    scores = [float(s) for s in (result.scores or ())]
    lines = [{"text": t, "confidence": round(s, 4)} for t, s in zip(texts, scores, strict=False)]
    return {
        "text": "\n".join(texts),
        "confidence": round(sum(scores) / len(scores), 4) if scores else 0.0,
        "lines": lines,
    }
