"""botocore's data for S3, loaded once per process and lean.

Every S3 client botocore builds loads its models through a session's data loader: S3's
service model, its endpoint rule set and the partitions, plus the legacy endpoint table of
every AWS service. As botocore loads them (ordered dicts, every shape's documentation) they
came to ~15 MiB per session, most of a copy's memory before any data moves. `lean_loader()`
is one loader shared by every session in the process (its cache holds each model once) that
parses into plain dicts, drops the documentation (botocore reads it only to render help),
(emptied) and keeps the S3 entries of the endpoint table: ~5 MiB in all.
"""

from __future__ import annotations

import gzip
import json
import os
import threading

_DROP = frozenset({"documentation", "documentationUrl"})
_SERVICES = frozenset({"s3", "s3-control"})
_lock = threading.Lock()
_loader = None


def _without_docs(pairs: list[tuple[str, object]]) -> dict:
    return {k: "" if k in _DROP else v for k, v in pairs}  # the keys stay: botocore reads some


def lean_loader():
    """The process's data loader for S3 clients (register it as a session's `data_loader`)."""
    global _loader
    with _lock:
        if _loader is None:
            _loader = _new_loader()
        return _loader


def _new_loader():
    from botocore.loaders import JSONFileLoader, Loader

    class LeanFiles(JSONFileLoader):
        def load_file(self, file_path):
            for ext, opener in ((".json", open), (".json.gz", gzip.open)):
                if os.path.isfile(file_path + ext):
                    with opener(file_path + ext, "rb") as f:
                        data = json.loads(f.read().decode("utf-8"), object_pairs_hook=_without_docs)
                    if os.path.basename(file_path) == "endpoints":
                        for partition in data.get("partitions", []):
                            services = partition.get("services", {})
                            partition["services"] = {k: v for k, v in services.items() if k in _SERVICES}
                    return data
            return None

    extra = [os.path.expanduser(p) for p in os.environ.get("AWS_DATA_PATH", "").split(os.pathsep) if p]
    return Loader(extra_search_paths=extra or None, file_loader=LeanFiles())
