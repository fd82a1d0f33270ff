"""The orchestrator Lifeboat runs on: Prefect's API behind one adapter (`prefect_api`)."""
