"""``render_text``: draw a line of text, black on white, into a PNG in the run's workspace (Pillow's
built-in scalable font), for example as an image to read back with ``ocr_extract``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from mother.errors import ToolError
from workers.tools.files import inside

__all__ = ["run"]

MARGIN = 48


def run(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    text = str(inputs["text"])
    target = inside(workspace, inputs.get("output_path"), "output_path")
    if target.suffix.lower() != ".png":
        raise ToolError("output_path must end in .png")
    font = ImageFont.load_default(size=int(inputs.get("font_size", 48)))
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox(
        (0, 0), text, font=font
    )
    size = (int(right - left) + 2 * MARGIN, int(bottom - top) + 2 * MARGIN)
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((MARGIN - left, MARGIN - top), text, fill="black", font=font)
    target.parent.mkdir(parents=True, exist_ok=True)
    image.save(target)
    return {
        "output_path": str(target.relative_to(workspace.resolve())),
        "size": {"width": size[0], "height": size[1]},
    }
