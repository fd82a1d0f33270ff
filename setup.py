"""Maps the layer folders at the repository root into the one import package `lifeboat_dr`
(everything else is in pyproject.toml): `flows/` is `lifeboat_dr.flows`, `core/` is
`lifeboat_dr.core`, and so on. Every folder below a layer is a package: those with an
`__init__.py` hold code, the others only the files pyproject.toml's package-data ships
(`runbooks/jobs/`, `providers/compute/catalog/v8/…`), which setuptools takes from packages only."""

from pathlib import Path

from setuptools import setup

PACKAGE = "lifeboat_dr"
LAYERS = ("kernel", "runbooks", "providers", "core", "standins", "flows", "shell", "demo", "testing")


def packages():
    yield PACKAGE, PACKAGE
    for layer in LAYERS:
        for folder in sorted({Path(layer), *Path(layer).rglob("*")}):
            if folder.is_dir() and all(p.isidentifier() and p != "__pycache__" for p in folder.parts):
                yield f"{PACKAGE}." + ".".join(folder.parts), str(folder)


found = dict(packages())
setup(packages=list(found), package_dir=found)
