"""`lifeboat manifest write DIR [--step N]`: commit a local checkpoint for Lifeboat.

Run by the training job after every shard is written: records each shard's size and
CRC32C and writes `lifeboat-manifest.json` create-only, last, as the commit point. The same
as `lifeboat_dr.core.checkpoints.manifest.write_manifest(DIR, step)`."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError, PreconditionFailed
from lifeboat_dr.shell.cli import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "manifest",
        help=COMMANDS["manifest"],
        description="Checkpoint manifests: per-shard size and CRC32C, written last as the commit.",
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    w = sub.add_parser("write", help="commit the checkpoint directory DIR")
    w.add_argument("directory", metavar="DIR", help="local checkpoint directory, shards already written")
    w.add_argument("--step", type=int, default=None, help="training step (default: the number in DIR's name)")
    w.add_argument("--json", action="store_true", help="print the committed manifest's summary as JSON")
    w.set_defaults(handler=run_write)


def run_write(args) -> int:
    from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, write_manifest

    directory = Path(args.directory)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory")
    step = args.step
    if step is None:
        digits = re.findall(r"\d+", directory.resolve().name)
        if not digits:
            raise ConfigError(f"{directory}: no step number in the name; pass --step N")
        step = int(digits[-1])
    try:
        manifest = write_manifest(directory, step)
    except PreconditionFailed:
        raise ConfigError(
            f"{directory / MANIFEST_NAME} exists: this checkpoint is already committed"
        ) from None
    total = sum(s.size for s in manifest.shards)
    if args.json:
        doc = {
            "manifest": str(directory / MANIFEST_NAME),
            "step": step,
            "shards": len(manifest.shards),
            "bytes": total,
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(f"committed {directory / MANIFEST_NAME}: step {step}, {len(manifest.shards)} shards, {total} bytes")
    return 0
