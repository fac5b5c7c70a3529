"""Checks shared by the report tests: a PNG is valid (signature, IHDR, decodes), an HTML page
is self-contained (every image an embedded PNG, nothing fetched from the network)."""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk; asserts the signature and chunk order."""
    assert data[:8] == PNG_SIGNATURE, "not a PNG signature"
    length, ctype = struct.unpack(">I4s", data[8:16])
    assert ctype == b"IHDR" and length == 13, "first chunk is not IHDR"
    return struct.unpack(">II", data[16:24])


def assert_png(path: Path, min_side: int = 100) -> tuple[int, int]:
    """A real, decodable PNG of a sensible size."""
    import matplotlib.image as mpimg

    data = path.read_bytes()
    w, h = png_size(data)
    assert w >= min_side and h >= min_side, f"{path}: {w}x{h}"
    arr = mpimg.imread(path)
    assert arr.shape[:2] == (h, w), f"{path}: decoded {arr.shape}, IHDR {w}x{h}"
    assert arr.std() > 0, f"{path}: a blank image"
    return w, h


IMG = re.compile(r"<img\b[^>]*\bsrc=\"([^\"]*)\"")


def embedded_images(html: str) -> list[bytes]:
    """The PNG bytes of every <img> (each must be a base64 data URI)."""
    out = []
    for src in IMG.findall(html):
        assert src.startswith("data:image/png;base64,"), f"image not embedded: {src[:60]}"
        out.append(base64.b64decode(src.split(",", 1)[1]))
    return out


def assert_self_contained(html: str) -> None:
    """No script, stylesheet link or any URL the page would fetch."""
    low = html.lower()
    for needle in ("<script", "<link", 'src="http', "src='http", "url(http", "@import"):
        assert needle not in low, f"page is not self-contained: found {needle!r}"
