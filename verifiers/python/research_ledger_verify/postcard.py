"""postcard's wire format, as docs/event-payloads.md lists it: varints, zigzag, little-endian
f64, length-prefixed strings, options and lists."""

import struct


class DecodeError(Exception):
    """The bytes are not a value of the expected shape."""


class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.at = 0

    def left(self) -> int:
        return len(self.data) - self.at

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise DecodeError("unexpected end of input")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def varint(self, bits: int = 64) -> int:
        value = 0
        shift = 0
        for _ in range((bits + 6) // 7):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                if value >= 1 << bits:
                    raise DecodeError("varint out of range")
                return value
            shift += 7
        raise DecodeError("varint too long")

    def zigzag(self) -> int:
        n = self.varint(64)
        return (n >> 1) ^ -(n & 1)

    def f64(self) -> float:
        return struct.unpack("<d", self.take(8))[0]

    def boolean(self) -> bool:
        b = self.take(1)[0]
        if b > 1:
            raise DecodeError("a bool is 0 or 1")
        return b == 1

    def string(self) -> str:
        n = self.varint(64)
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError("a string is not UTF-8") from e

    def raw32(self) -> bytes:
        return self.take(32)
