"""Lifeboat: disaster-recovery runbooks for GPU training and inference clusters, on Prefect.

One import package; its layers are folders of their own at the repository root, mapped in by
`setup.py` (B imports A only when A is below B):

    kernel ← runbooks ← providers ← core ← standins ← flows ← shell ← demo

`testing/` (doubles, emulator and server launchers) sits beside them: product code never
imports it. `tests/test_layers.py` holds the picture to the code.
"""
