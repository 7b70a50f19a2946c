"""``resize_image``: resize an image in the run's workspace with Pillow (Lanczos), written beside it as
``{stem}_{W}x{H}{suffix}`` unless ``output_path`` names the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from mother.errors import ToolError
from workers.tools.files import inside

__all__ = ["run"]

# the largest image Pillow opens here (its own guard against decompression bombs is a warning)
MAX_PIXELS = 100_000_000


def run(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    source = inside(workspace, inputs.get("input_path"), "input_path")
    if not source.is_file():
        raise ToolError(f"no image {inputs.get('input_path')!r} in the workspace")
    width, height = int(inputs["width"]), int(inputs["height"])
    if width < 1 or height < 1:
        raise ToolError(f"width and height must be at least 1 pixel, got {width}x{height}")
    target = (
        inside(workspace, inputs["output_path"], "output_path")
        if inputs.get("output_path")
        else source.with_name(f"{source.stem}_{width}x{height}{source.suffix}")
    )
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        with Image.open(source) as image:
            original = {"width": image.width, "height": image.height}
            resized = image.resize((width, height), Image.Resampling.LANCZOS)
            target.parent.mkdir(parents=True, exist_ok=True)
            resized.save(target)
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ToolError(
            f"{inputs.get('input_path')!r} is not an image Pillow can read: {exc}"
        ) from None
    return {
        "output_path": str(target.relative_to(workspace.resolve())),
        "original_size": original,
        "new_size": {"width": width, "height": height},
    }
