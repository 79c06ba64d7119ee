"""Image files whose headers declare a size their pixels are not: bombs and huge scans, small on disk."""

import io
import struct
import zlib

from PIL import Image


def declaring(path, width: int, height: int) -> None:
    """A small real JPEG whose frame header is rewritten to declare width × height."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buffer, "JPEG")
    raw = bytearray(buffer.getvalue())
    sof = raw.index(b"\xff\xc0")
    raw[sof + 5:sof + 7], raw[sof + 7:sof + 9] = height.to_bytes(2, "big"), width.to_bytes(2, "big")
    path.write_bytes(bytes(raw))


def png_declaring(path, width: int, height: int) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
