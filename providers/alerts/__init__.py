"""Alert receivers: `alertmanager_routes(settings)` for `lifeboat serve`."""
