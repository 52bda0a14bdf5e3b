"""Just enough OpenPGP (RFC 4880) to read a public key's fingerprint without gpg, which a machine with only Python
and make may lack: armor (section 6), packet headers (4.2) and the version-4 fingerprint (12.2: the SHA-1 of 0x99,
the two-octet length and the public-key packet's body). `python3 tests/openpgp.py FILE` prints what
`gpg --with-colons --show-keys FILE` prints of it (a `pub` and an `fpr` record per key), for a stub gpg."""

from __future__ import annotations

import base64
import hashlib
import sys

PUBLIC_KEY = 6


def dearmor(text: str) -> bytes:
    lines = text.strip().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"))
    body = lines[start + 1:]
    body = body[next(i for i, ln in enumerate(body) if not ln.strip()) + 1:]  # after the armor headers
    data = [ln for ln in body if not ln.startswith(("=", "-----END"))]
    return base64.b64decode("".join(data))


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(data: bytes) -> str:
    b64 = base64.b64encode(data).decode()
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    crc = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode()
    return "\n".join(["-----BEGIN PGP PUBLIC KEY BLOCK-----", "", *lines, "=" + crc,
                      "-----END PGP PUBLIC KEY BLOCK-----"]) + "\n"


def packets(data: bytes):
    """(tag, body) of every packet."""
    i = 0
    while i < len(data):
        head = data[i]
        if head & 0x40:  # new format
            tag, i = head & 0x3F, i + 1
            first = data[i]
            if first < 192:
                length, i = first, i + 1
            elif first < 224:
                length, i = ((first - 192) << 8) + data[i + 1] + 192, i + 2
            else:
                length, i = int.from_bytes(data[i + 1:i + 5], "big"), i + 5
        else:
            tag, kind, i = (head >> 2) & 0x0F, head & 0x03, i + 1
            size = {0: 1, 1: 2, 2: 4}[kind]
            length, i = int.from_bytes(data[i:i + size], "big"), i + size
        yield tag, data[i:i + length]
        i += length


def packet(tag: int, body: bytes) -> bytes:
    """An old-format packet with a two-octet length."""
    return bytes([0x80 | (tag << 2) | 1]) + len(body).to_bytes(2, "big") + body


def fingerprints(data: bytes) -> list[str]:
    return [hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
            for tag, body in packets(data) if tag == PUBLIC_KEY and body[0] == 4]


if __name__ == "__main__":
    with open(sys.argv[-1]) as f:
        for fpr in fingerprints(dearmor(f.read())):
            print(f"pub:-:2048:1:{fpr[-16:]}:0:::::::scESC:::::::23::0:")
            print(f"fpr:::::::::{fpr}:")
