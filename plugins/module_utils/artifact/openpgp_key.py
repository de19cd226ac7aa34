# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Fingerprints of the primary keys in an OpenPGP public key file (armored or binary), without gpg.

Why: a repository's `signed-by` key is the root of trust for every package that repository installs, and it
is fetched over the network like any artifact. Pinning it by fingerprint closes the gap a checksum closes
for downloads; computing the fingerprint here (RFC 4880 section 12.2, RFC 9580 section 5.5.4) means the check
works on hosts without gnupg and cannot be confused by a keyring already on the host. Version 4 fingerprints
are SHA-1 by definition: that is the format, not a choice of hash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

_PUBLIC_KEY_TAG = 6
_ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_FINGERPRINT_RE = re.compile(r"^([0-9A-F]{40}|[0-9A-F]{64})$")


class OpenPGPKeyError(ValueError):
    """The file is not an OpenPGP public key, or a fingerprint is malformed."""


def normalise_fingerprint(text: str) -> str:
    """'eb69 3b30 …' and 'EB693B30…' are the same pin; anything but 40 or 64 hex digits is refused."""
    value = re.sub(r"\s+", "", str(text)).upper()
    if not _FINGERPRINT_RE.match(value):
        raise OpenPGPKeyError(f"'{text}' is not an OpenPGP fingerprint (40 or 64 hex digits)")
    return value


def dearmor(data: bytes) -> bytes:
    """The binary packets of an ASCII-armored key file, every block of it; binary input is returned as it is.

    Every block counts: apt trusts each key a `signed-by` file holds, so a second block must be checked too.
    """
    if data[:1] and data[0] & 0x80:
        return data
    text = data.decode("ascii", errors="replace")
    blocks = text.split(_ARMOR_BEGIN)[1:]
    if not blocks:
        raise OpenPGPKeyError("not an OpenPGP public key block (no armor header, not binary packets)")
    return b"".join(_armor_body(block) for block in blocks)


def _armor_body(block: str) -> bytes:
    """Base64 body of one armored block: after the header lines and the blank line, before the checksum."""
    body: list[str] = []
    in_headers = True
    for raw in block.splitlines()[1:]:
        line = raw.strip()
        if in_headers:
            in_headers = ":" in line
            if in_headers or not line:
                continue
        if line.startswith(("-----END", "=")):
            break
        body.append(line)
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise OpenPGPKeyError(f"armored key body is not base64: {exc}") from exc


def _packet_header(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, body start, body length) of the packet at pos, old or new header format."""
    first = data[pos]
    if not first & 0x80:
        raise OpenPGPKeyError(f"byte {pos} does not start an OpenPGP packet")
    if first & 0x40:
        tag, length_pos = first & 0x3F, pos + 1
        octet = data[length_pos]
        if octet < 192:
            return tag, length_pos + 1, octet
        if octet < 224:
            return tag, length_pos + 2, ((octet - 192) << 8) + data[length_pos + 1] + 192
        if octet == 255:
            return tag, length_pos + 5, int.from_bytes(data[length_pos + 1 : length_pos + 5], "big")
        raise OpenPGPKeyError("partial-length packets do not occur in public keys")
    tag, kind = (first >> 2) & 0x0F, first & 0x03
    if kind == 3:
        return tag, pos + 1, len(data) - pos - 1
    size = (1, 2, 4)[kind]
    return tag, pos + 1 + size, int.from_bytes(data[pos + 1 : pos + 1 + size], "big")


def _fingerprint(body: bytes) -> str:
    version = body[0] if body else 0
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version in (5, 6):
        prefix = b"\x9a" if version == 5 else b"\x9b"
        return hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise OpenPGPKeyError(f"OpenPGP key version {version} is not supported")


def primary_fingerprints(data: bytes) -> list[str]:
    """Fingerprints of every primary (certifying) key in the file; subkeys belong to their primary."""
    packets = dearmor(data)
    found: list[str] = []
    pos = 0
    while pos < len(packets):
        tag, start, length = _packet_header(packets, pos)
        end = start + length
        if end > len(packets):
            raise OpenPGPKeyError("truncated OpenPGP packet")
        if tag == _PUBLIC_KEY_TAG:
            found.append(_fingerprint(packets[start:end]))
        pos = end
    if not found:
        raise OpenPGPKeyError("the file holds no OpenPGP public key")
    return found
