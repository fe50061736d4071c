"""Reading a screenshot's pixels with the standard library: 8-bit RGB or RGBA PNGs, not
interlaced (what Chromium writes), enough to check what a page looks like."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]  # unfiltered scanlines

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        start = x * self.channels
        r, g, b = self.rows[y][start:start + 3]
        return r, g, b

    def colours(self, step: int = 4) -> set[tuple[int, int, int]]:
        """The distinct colours of every ``step``-th pixel of every ``step``-th row."""
        return {self.pixel(x, y) for y in range(0, self.height, step)
                for x in range(0, self.width, step)}


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def read_png(data: bytes) -> Image:
    assert data[:8] == SIGNATURE, "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, "unsupported PNG"
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prior = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = prior[i]
            corner = prior[i - channels] if i >= channels else 0
            add = (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]
            line[i] = (line[i] + add) & 0xFF
        rows.append(bytes(line))
        prior = line
    return Image(width, height, channels, rows)
