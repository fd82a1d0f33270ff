"""Network namespaces as separate hosts, and a partition that makes connections *hang*.

`Sites(tag)` builds four namespaces: `<tag>-net` holds a bridge; the primary (`<tag>-p`,
10.77.0.1), the secondary (`<tag>-s`, 10.77.0.2) and the control plane (`<tag>-c`, 10.77.0.3)
each plug into it with a veth pair. Addresses live inside the namespaces, so concurrent runs
never collide (the tag, unique per run, names the namespaces). The secondary and the control
plane hold permanent neighbour entries for the primary: after `partition()` (the primary's
bridge port set down) their packets still leave and are dropped in silence, SYNs are never
answered, and every connection hangs until the client's own timeout, as in a region
partition (this kernel has no netem and there is no iptables). `restore()` brings it back.

Every process started through `Sites.spawn` is killed (its whole session) and every
namespace deleted by `close()`, also after a failure. Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid

ADDRESSES = {"p": "10.77.0.1", "s": "10.77.0.2", "c": "10.77.0.3"}
ROLES = {"primary": "p", "secondary": "s", "control": "c"}


def _ip(*args: str, timeout: float = 10) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be built here (None: they can). Tries for real: creates and
    deletes a namespace with a veth pair."""
    if not shutil.which("ip"):
        return "no `ip` (iproute2) on this machine"
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs CAP_SYS_ADMIN"
    name = f"lbcheck-{uuid.uuid4().hex[:8]}"
    try:
        _ip("netns", "add", name)
        _ip("-n", name, "link", "add", "a0", "type", "veth", "peer", "name", "b0")
        _ip("-n", name, "link", "add", "br0", "type", "bridge")
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot create network namespaces here: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


class Sites:
    def __init__(self, tag: str | None = None):
        self.tag = tag or f"lbpd-{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.net = f"{self.tag}-net"
        self.ns = {role: f"{self.tag}-{short}" for role, short in ROLES.items()}
        self.addr = {role: ADDRESSES[short] for role, short in ROLES.items()}
        self.processes: list[subprocess.Popen] = []
        self.created: list[str] = []

    def up(self) -> Sites:
        for name in (self.net, *self.ns.values()):
            _ip("netns", "add", name)
            self.created.append(name)
        _ip("-n", self.net, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.net, "link", "set", "br0", "up")
        for role, ns in self.ns.items():
            port = f"{ROLES[role]}0"
            _ip("-n", self.net, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.net, "link", "set", port, "master", "br0")
            _ip("-n", self.net, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[role]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        mac = _ip("-n", self.ns["primary"], "-br", "link", "show", "eth0").split()[2]
        for role in ("secondary", "control"):
            _ip(
                "-n", self.ns[role], "neigh", "replace", self.addr["primary"],
                "lladdr", mac, "dev", "eth0", "nud", "permanent",
            )  # fmt: skip
        return self

    def partition(self, role: str = "primary") -> None:
        """`role`'s link is cut: its packets and everyone's to it vanish, nothing refuses."""
        _ip("-n", self.net, "link", "set", f"{ROLES[role]}0", "down")

    def restore(self, role: str = "primary") -> None:
        _ip("-n", self.net, "link", "set", f"{ROLES[role]}0", "up")

    def argv(self, role: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[role], *argv]

    def spawn(self, role: str, argv: list[str], **kw) -> subprocess.Popen:
        """A process in `role`'s namespace, in a session of its own (killed whole by close)."""
        proc = subprocess.Popen(self.argv(role, argv), start_new_session=True, **kw)
        self.processes.append(proc)
        return proc

    def run(self, role: str, argv: list[str], *, timeout: float, **kw) -> subprocess.CompletedProcess:
        """Run to completion in `role`'s namespace; killed (whole session) past `timeout`."""
        proc = self.spawn(role, argv, **kw)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def close(self) -> None:
        for proc in reversed(self.processes):
            stop(proc)
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.created.clear()

    def __enter__(self) -> Sites:
        try:
            return self.up()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def leftovers(tag: str) -> list[str]:
    """Namespaces of run `tag` still present (a test asserts none after a run)."""
    names = _ip("netns", "list")
    return [line.split()[0] for line in names.splitlines() if line.startswith(f"{tag}-")]
