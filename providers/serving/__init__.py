"""Model endpoints: a serving site's own HTTP API (health, model version, a real request)."""
