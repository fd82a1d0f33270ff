"""Checkpoints in a store: layouts, discovery, completeness, and Lifeboat's manifest."""
