"""Maps the layer folders at the repository root into the one import package `lifeboat_dr`
(everything else is in pyproject.toml): `flows/` is `lifeboat_dr.flows`, `core/` is
`lifeboat_dr.core`, and so on. Every folder below a layer that has an `__init__.py` is a package."""

from pathlib import Path

from setuptools import setup

PACKAGE = "lifeboat_dr"
LAYERS = ("kernel", "runbooks", "providers", "core", "standins", "flows", "shell", "demo", "testing")


def packages():
    yield PACKAGE, PACKAGE
    for layer in LAYERS:
        for init in sorted(Path(layer).rglob("__init__.py")):
            folder = init.parent
            yield f"{PACKAGE}." + ".".join(folder.parts), str(folder)


found = dict(packages())
setup(packages=list(found), package_dir=found)
