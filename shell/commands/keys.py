"""`lifeboat keys generate FILE` / `lifeboat keys public FILE`: the approval signing key.

`generate` writes a new Ed25519 private key to FILE (mode 0600, never over an existing file)
for `lifeboat serve` (LIFEBOAT_APPROVAL_SIGNING_KEY_FILE=FILE) and prints its public key for
the workers (LIFEBOAT_APPROVAL_PUBLIC_KEYS). `public` prints the public key of an existing
FILE. To rotate: generate a new key, give workers both public keys (comma-separated), switch
`lifeboat serve` to the new file, then drop the old public key (docs/approvals.md)."""

from __future__ import annotations

import json
from pathlib import Path

from lifeboat_dr.shell.cli import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser("keys", help=COMMANDS["keys"], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("action", choices=["generate", "public"], help="create a key, or show a key's public half")
    p.add_argument("file", type=Path, metavar="FILE", help="the private key file (PEM)")
    p.add_argument("--json", action="store_true", help="print the key file and public key as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.core.approval_keys import (
        PUBLIC_KEYS,
        SIGNING_KEY_FILE,
        generate,
        load_signing_key,
        public_text,
    )

    if args.action == "generate":
        public = generate(args.file)
        if not args.json:
            print(
                f"wrote {args.file} (mode 0600): give it to lifeboat serve as {SIGNING_KEY_FILE}={args.file}"
            )
    else:
        public = load_signing_key(args.file).public_key()
    if args.json:
        doc = {
            "file": str(args.file),
            "written": args.action == "generate",
            "public_key": public_text(public),
        }
        print(
            json.dumps(
                {**doc, "env": {SIGNING_KEY_FILE: str(args.file), PUBLIC_KEYS: doc["public_key"]}}, indent=2
            )
        )
        return 0
    print(f"{PUBLIC_KEYS}={public_text(public)}")
    return 0
