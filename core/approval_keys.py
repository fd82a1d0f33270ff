"""The approval keys: an Ed25519 signing key where a person is verified, public keys everywhere else.

`lifeboat serve` (the only place that verifies a person: Slack's signature, the identity
proxy's login) holds the private key, in a file only its user can read
(LIFEBOAT_APPROVAL_SIGNING_KEY_FILE, written by `lifeboat keys generate`). Workers and flows
hold public keys only (LIFEBOAT_APPROVAL_PUBLIC_KEYS, or a file named by
LIFEBOAT_APPROVAL_PUBLIC_KEYS_FILE, one `ed25519:<base64>` per line): a worker that is fully
compromised can refuse to act, but cannot sign as a person. Two public keys are accepted at
once, so a new signing key can be rolled out before the old one is retired.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from lifeboat_dr.kernel.errors import ConfigError

SIGNING_KEY_FILE = "LIFEBOAT_APPROVAL_SIGNING_KEY_FILE"
PUBLIC_KEYS = "LIFEBOAT_APPROVAL_PUBLIC_KEYS"
PUBLIC_KEYS_FILE = "LIFEBOAT_APPROVAL_PUBLIC_KEYS_FILE"
RETIRED = "LIFEBOAT_APPROVAL_KEY"  # the shared HMAC key of before: anyone holding it could sign
MAX_PUBLIC_KEYS = 2  # the current key and, during a rotation, the next one
PREFIX = "ed25519:"
MAX_KEY_FILE = 16 * 1024


def public_text(key: Ed25519PublicKey) -> str:
    """`ed25519:<base64 of the 32 raw bytes>`: what LIFEBOAT_APPROVAL_PUBLIC_KEYS lists."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PREFIX + base64.b64encode(raw).decode()


def key_id(key: Ed25519PublicKey) -> str:
    """A short name for a public key, for logs and refusals (never a secret)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:12]


def parse_public_keys(text: str, where: str = PUBLIC_KEYS) -> tuple[Ed25519PublicKey, ...]:
    """Public keys from `ed25519:<base64>` entries separated by commas, spaces or lines
    (`#` starts a comment); a bad entry is one line naming it."""
    entries = [e for line in text.splitlines() for e in line.split("#", 1)[0].replace(",", " ").split()]
    keys = []
    for n, entry in enumerate(entries, 1):
        try:
            if not entry.startswith(PREFIX):
                raise ValueError(f"does not start with {PREFIX!r}")
            raw = base64.b64decode(entry.removeprefix(PREFIX), validate=True)
            keys.append(Ed25519PublicKey.from_public_bytes(raw))
        except ValueError as e:
            raise ConfigError(f"{where}: entry {n} is not an Ed25519 public key ({e})") from None
    if len(keys) > MAX_PUBLIC_KEYS:
        raise ConfigError(
            f"{where}: {len(keys)} public keys; at most {MAX_PUBLIC_KEYS} (the current one and the next)"
        )
    return tuple(keys)


def public_keys(environ: Mapping[str, str] | None = None) -> tuple[Ed25519PublicKey, ...]:
    """The public keys this worker verifies decisions with; () when none is configured."""
    env = os.environ if environ is None else environ
    if path := env.get(PUBLIC_KEYS_FILE):
        return parse_public_keys(_read_small(Path(path), PUBLIC_KEYS_FILE), PUBLIC_KEYS_FILE)
    return parse_public_keys(env.get(PUBLIC_KEYS, ""))


def signing_key(environ: Mapping[str, str] | None = None) -> Ed25519PrivateKey:
    """The private key `lifeboat serve` signs decisions with (LIFEBOAT_APPROVAL_SIGNING_KEY_FILE).
    Refused when the file is readable by anyone but its owner."""
    env = os.environ if environ is None else environ
    if env.get(RETIRED) and not env.get(SIGNING_KEY_FILE):
        raise ConfigError(
            f"{RETIRED} (a key shared with the workers) is no longer used: create a signing key with "
            f"`lifeboat keys generate FILE`, set {SIGNING_KEY_FILE}=FILE here and give the workers "
            f"the public key it prints ({PUBLIC_KEYS})"
        )
    if not (name := env.get(SIGNING_KEY_FILE)):
        raise ConfigError(
            f"approvals need {SIGNING_KEY_FILE}: the private key that signs what a verified person "
            "decided (create one with `lifeboat keys generate FILE`)"
        )
    return load_signing_key(Path(name))


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the approval signing key ({e.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: the approval signing key is readable by others (chmod 600 {path})")
    data = _read_small(path, SIGNING_KEY_FILE).encode()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{path}: not a PEM private key (create one with `lifeboat keys generate`)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: not an Ed25519 private key")
    return key


def generate(path: Path) -> Ed25519PublicKey:
    """Write a new private key to `path` (created 0600, never over an existing file); its public key."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path} exists: a signing key is never overwritten (remove it first)") from None
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return key.public_key()


def _read_small(path: Path, what: str) -> str:
    """A small regular file's text (a FIFO, a device or a huge file is refused, never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigError(f"{what}={path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{what}={path}: not a regular file")
        data = f.read(MAX_KEY_FILE + 1)
    if len(data) > MAX_KEY_FILE:
        raise ConfigError(f"{what}={path}: over {MAX_KEY_FILE} bytes, not a key file")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"{what}={path}: not a text key file") from None
