"""Test doubles and peer launchers: the in-memory store, a fake of SkyPilot's SDK, scripted
failover steps, moto / GCS-emulator / Prefect-server launchers.

Shipped with the package (not only in the repository) so that an out-of-tree backend can run
Lifeboat's contract suites and the fault simulator against its own adapter. Product code never
imports it (`tests/test_layers.py`)."""
