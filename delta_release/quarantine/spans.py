"""Where each line of a raw batch lies in its bytes: (offset, length), computed from the bytes alone.

Lines are numbered exactly as `contract.decode.split_lines` numbers them: '\\n'-separated, a trailing
newline ends the last line, a leading UTF-8 BOM is not part of line 1, and a '\\r' before the '\\n' is not
part of its line. Offsets count from the first byte of the batch as stored (the BOM included), so
`data[offset:offset + length]` is the line's bytes as the decoder saw them.
"""

from __future__ import annotations

BOM = b"\xef\xbb\xbf"


def line_spans(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every line of `data`, line 1 first."""
    start = len(BOM) if data.startswith(BOM) else 0
    spans: list[tuple[int, int]] = []
    n = len(data)
    while start < n:
        nl = data.find(b"\n", start)
        end = n if nl < 0 else nl
        stop = end - 1 if end > start and data[end - 1] == 0x0D else end
        spans.append((start, stop - start))
        if nl < 0:
            break
        start = nl + 1
    return spans


def line_bytes(data: bytes, offset: int, length: int) -> bytes:
    return data[offset:offset + length]
