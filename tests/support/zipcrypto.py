"""A real password-protected zip (traditional PKWARE encryption, APPNOTE 6.1), for the tests:
Python's zipfile decrypts it but cannot write one, and the `zip` tool may be missing. The test
proves it is real by reading it back with zipfile and the password."""
from __future__ import annotations

import struct
import zlib


def _crc_byte(crc: int, byte: int) -> int:
    return zlib.crc32(bytes([byte]), crc ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


class _Keys:
    def __init__(self, password: bytes) -> None:
        self.k0, self.k1, self.k2 = 0x12345678, 0x23456789, 0x34567890
        for byte in password:
            self.update(byte)

    def update(self, byte: int) -> None:
        self.k0 = _crc_byte(self.k0, byte)
        self.k1 = ((self.k1 + (self.k0 & 0xFF)) * 134775813 + 1) & 0xFFFFFFFF
        self.k2 = _crc_byte(self.k2, (self.k1 >> 24) & 0xFF)

    def encrypt(self, data: bytes) -> bytes:
        out = bytearray()
        for byte in data:
            temp = (self.k2 | 2) & 0xFFFF
            out.append(byte ^ (((temp * (temp ^ 1)) >> 8) & 0xFF))
            self.update(byte)
        return bytes(out)


def encrypted_zip(members: dict[str, bytes], password: bytes) -> bytes:
    """A zip whose members are stored (no compression) and encrypted with `password`."""
    local, central = bytearray(), bytearray()
    for name, data in members.items():
        crc = zlib.crc32(data)
        keys = _Keys(password)
        header = bytes(range(11)) + bytes([crc >> 24])  # the last byte lets a reader check the password
        body = keys.encrypt(header + data)
        offset = len(local)
        fields = struct.pack("<HHHHHIIIHH", 20, 0x1, 0, 0, 0x21, crc, len(body), len(data), len(name), 0)
        local += b"PK\x03\x04" + fields + name.encode() + body
        central += (b"PK\x01\x02" + struct.pack("<H", 20) + fields
                    + struct.pack("<HHHII", 0, 0, 0, 0, offset) + name.encode())
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    return bytes(local + central + end)
