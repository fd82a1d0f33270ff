"""What a trainer tells the world, the same for every demo trainer.

JSON lines appended to its loss log (and echoed to stdout, the job log, with `echo`):
`{"step": N, "loss": L, "ts": epoch}` per step, and once after a resume
`{"event": "loaded", "step": N, "ts": epoch}` (`lifeboat_dr.core.resume` parses both); and a heartbeat
file `{"step", "ts", "loss"}` replaced atomically after every step (the training_progress probe).
"""

from __future__ import annotations

import json
import time
from pathlib import Path


class RunLog:
    """Context manager: the loss log open for appending while the trainer runs."""

    def __init__(self, loss_log: str | Path, heartbeat: str | Path, *, echo: bool = False):
        self.loss_log, self.heartbeat, self.echo = Path(loss_log), Path(heartbeat), echo
        self._file = None

    def __enter__(self) -> RunLog:
        self.loss_log.parent.mkdir(parents=True, exist_ok=True)
        self.heartbeat.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.loss_log, "a")  # noqa: SIM115 - closed by __exit__
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def loaded(self, step: int) -> None:
        """The resume checkpoint is loaded: the failover timestamps "checkpoint loaded" here."""
        self._emit({"event": "loaded", "step": step, "ts": time.time()})

    def step(self, step: int, loss: float) -> None:
        now = time.time()
        self._emit({"step": step, "loss": loss, "ts": now})
        tmp = self.heartbeat.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step, "ts": now, "loss": loss}))
        tmp.replace(self.heartbeat)

    def _emit(self, record: dict) -> None:
        line = json.dumps(record)
        self._file.write(line + "\n")
        self._file.flush()
        if self.echo:  # the job log then carries it too (SkyPilot logs, LocalCompute)
            print(line, flush=True)
