"""The protobuf wire format, read: the one reader behind every hand-written protobuf decoder.

A message is a sequence of fields, each a varint tag (field number << 3 | wire type) and a value:
wire type 0 a varint, 2 a length-delimited run of bytes (strings, bytes, sub-messages, map
entries, packed repeats), 1 and 5 fixed 8 and 4 bytes (skipped: no field read here uses them);
groups (3, 4) are refused. `fields` gives (number, value) pairs, the value an int for a varint and
bytes for a length-delimited field; what the bytes mean is the caller's schema.

Kubernetes bodies (`application/vnd.kubernetes.protobuf`) are `k8s\\x00` followed by a
runtime.Unknown message; MAGIC and CONTENT_TYPE are theirs. Anything malformed is a
ProtobufError (a ValueError; the API servers answer 400), and a message nested deeper than
MAX_DEPTH is refused, so hostile input costs bounded time and stack.
"""

from __future__ import annotations

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAX_DEPTH = 16


class ProtobufError(ValueError):
    """A body that is not the protobuf message it claims to be."""


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it (at most 10 bytes, 64 bits)."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """Every field of a message in wire order: (number, int for a varint | bytes for a
    length-delimited value); fixed-width fields are checked and skipped."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        tag, pos = varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == 0:
            value, pos = varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated field")
            out.append((number, data[pos:pos + length]))
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            pos += size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def utf8(data: bytes, name: str) -> str:
    """A string field's bytes as text; ProtobufError naming the field when not UTF-8."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ProtobufError(f"{name}: not UTF-8") from None


def check_depth(depth: int) -> None:
    """Refuse a message nested deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise ProtobufError("nesting too deep")
