"""An HAProxy backend as a traffic router, through HAProxy's runtime API. See base.py.

Each site is one server of one backend (`sites={"use4": "srv-use4"}`); HAProxy must expose
its stats socket at admin level (`stats socket /run/haproxy/admin.sock level admin`, or
`ipv4@127.0.0.1:9999`). Weights are read from `show servers state <backend>` (the user
weight), health from `show stat` (the server's status by HAProxy's own checks: UP, DOWN,
MAINT, or "no check"), and a change is sent as one line of `;`-separated
`set server <backend>/<server> weight N` commands, which HAProxy applies in order on one
connection. The runtime API answers in plain text; its error lines are mapped to
`NotFound` / `ProviderUnavailable` here and nowhere else.
"""

from __future__ import annotations

import csv
import re
import socket
from collections.abc import Mapping

from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.traffic.base import SiteHealth, check_weights

_NOT_FOUND = ("No such server", "No such backend", "Can't find backend", "No such proxy")
_REFUSED = ("Permission denied", "Unknown command")
_NAME = re.compile(r"^[A-Za-z0-9._:-]+$")  # HAProxy's own rule for proxy and server names


class HaproxyTraffic:
    timeout = 5.0  # seconds per runtime API request

    def __init__(self, socket_address: str, backend: str, sites: Mapping[str, str]):
        if not sites:
            raise ConfigError("haproxy router: no sites (site -> server name) given")
        bad = [n for n in (backend, *sites.values()) if not _NAME.match(n)]
        if bad:  # a name is spliced into a command line: `;` or a newline would add commands
            raise ConfigError(
                f"haproxy router: {bad[0]!r} is not a backend/server name (letters, digits, . _ : -)"
            )
        self.address, self.backend = socket_address, backend
        self._servers = dict(sites)  # site -> server name
        self._sites_of = {srv: site for site, srv in self._servers.items()}
        self.where = f"haproxy {socket_address} backend {backend}"

    def sites(self) -> tuple[str, ...]:
        return tuple(self._servers)

    def weights(self) -> dict[str, int]:
        rows = self._servers_state()
        return {site: int(rows[srv]["srv_uweight"]) for site, srv in self._servers.items()}

    def set_weights(self, weights: Mapping[str, int]) -> None:
        check_weights(self.sites(), weights, self.where)
        if not weights:
            return
        self._servers_state()  # every server exists, or nothing is sent: HAProxy would apply half a line
        line = "; ".join(
            f"set server {self.backend}/{self._servers[site]} weight {w}" for site, w in weights.items()
        )
        self._raise_for(self._send(line))

    def health(self) -> dict[str, SiteHealth]:
        weights = self.weights()
        stat = {
            r["svname"]: r
            for r in csv.DictReader(self._send("show stat").lstrip("# ").splitlines())
            if r.get("pxname") == self.backend
        }
        out = {}
        for site, srv in self._servers.items():
            row = stat.get(srv, {})
            status = row.get("status", "")
            state = "up" if status.startswith("UP") else "unknown" if status in ("no check", "") else "down"
            detail = " ".join(x for x in (status, row.get("check_status", "")) if x)
            out[site] = SiteHealth(site, weights[site], state, detail)
        return out

    def _servers_state(self) -> dict[str, dict[str, str]]:
        text = self._send(f"show servers state {self.backend}")
        self._raise_for(text)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        header = next((ln[2:].split() for ln in lines if ln.startswith("# ")), None)
        if header is None:
            raise ProviderUnavailable(f"{self.where}: unexpected answer to show servers state: {text[:80]!r}")
        rows = {}
        for ln in lines:
            if ln.startswith("#") or len(ln.split()) < len(header) - 8:  # skip the version line
                continue
            row = dict(zip(header, ln.split(), strict=False))
            if row.get("be_name") == self.backend:
                rows[row["srv_name"]] = row
        missing = [srv for srv in self._servers.values() if srv not in rows]
        if missing:
            raise NotFound(f"{self.where}: no server {', '.join(missing)}")
        return rows

    def _raise_for(self, answer: str) -> None:
        for line in answer.splitlines():
            if line.startswith(_NOT_FOUND):
                raise NotFound(f"{self.where}: {line.strip()}")
            if line.startswith(_REFUSED):
                raise ConfigError(f"{self.where}: {line.strip()} (the stats socket needs `level admin`)")

    def _send(self, command: str) -> str:
        """One request on a fresh connection (non-interactive mode): send, read to EOF."""
        try:
            if self.address.startswith(("/", "unix:")):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target: str | tuple[str, int] = self.address.removeprefix("unix:")
            else:
                host, _, port = self.address.removeprefix("ipv4@").rpartition(":")
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                target = (host or "127.0.0.1", int(port))
            with sock:
                sock.settimeout(self.timeout)
                sock.connect(target)
                sock.sendall(command.encode() + b"\n")
                chunks = []
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
        except (OSError, ValueError) as e:
            raise ProviderUnavailable(f"{self.where}: runtime API: {e}") from None
        return b"".join(chunks).decode(errors="replace")
