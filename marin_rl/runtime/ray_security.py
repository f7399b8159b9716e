"""Keep the Ray the project starts or joins closed: token authentication always on, a local Ray on loopback only.

Ray's gRPC servers (GCS, raylet, every worker) and its agents run whatever a client asks, so anyone who reaches a
port can run code in the cluster. Two measured facts about Ray 2.60 shape this module:
- Token mode comes from the `RAY_AUTH_MODE` environment variable, read into Ray's cached config when `ray` is
  imported; setting it later needs that config reloaded (as Ray's own default-on path does). The token is read
  from `RAY_AUTH_TOKEN`, else the file `RAY_AUTH_TOKEN_PATH`, else `~/.ray/auth_token` (Ray writes that one
  world-readable, 0644, when it makes it).
- `ray.init(_node_ip_address="127.0.0.1")` alone is rewritten to the machine's external address, and the servers
  then listen on all interfaces. With `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` Ray keeps 127.0.0.1 as the node
  address, and the GCS, raylet, workers, dashboard agent, runtime-env agent and metrics export all bind to it.
  A process that joins such a Ray from the same machine needs the same variable (else it dials the external
  address, where nothing listens).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from hydra.experimental.callback import Callback

logger = logging.getLogger(__name__)

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray takes 127.0.0.1 as this node's address
PRIVATE_MODE = 0o600


def token_path(environ: MutableMapping[str, str] = os.environ) -> Path:
    """Where Ray reads the token: `RAY_AUTH_TOKEN_PATH` if set, else Ray's default ~/.ray/auth_token."""
    named = environ.get(TOKEN_PATH_ENV)
    return Path(named).expanduser() if named else Path.home() / ".ray" / "auth_token"


def ensure_private_token(path: Path) -> Path:
    """Create a random token file readable only by its owner (0600), or tighten an existing one to 0600.

    A new token is written to a private temporary file and then linked into place, so a run starting at the same
    moment (e.g. another test worker) sees either no file or a complete one, never an empty one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            os.link(tmp, path)
            logger.info("made a new Ray authentication token in %s (mode 0600)", path)
            return path
        except FileExistsError:
            pass  # another process made it first: use theirs
        finally:
            os.unlink(tmp)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, PRIVATE_MODE)
        logger.warning("Ray token %s was readable by others (mode %o); set it to 0600", path, mode)
    if not path.read_text().strip():
        raise RuntimeError(f"Ray token file {path} is empty; delete it to have a new token made")
    return path


def token_auth_env(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """The variables that turn Ray's token authentication on; refuses `RAY_AUTH_MODE` set to anything but token."""
    mode = environ.get(AUTH_MODE_ENV, "token")
    if mode.lower() != "token":
        raise ValueError(
            f"{AUTH_MODE_ENV}={mode}: marin-rl runs Ray only with token authentication "
            f"(allowed: unset or 'token'); without it anyone who reaches Ray's ports can run code in the cluster"
        )
    if not environ.get(TOKEN_ENV):
        ensure_private_token(token_path(environ))
    return {AUTH_MODE_ENV: "token"}


def secure_ray_environment(local: bool, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set token auth (always) and loopback-only addressing (a local Ray) in `environ`, and make an already
    imported Ray see them; returns what was set. Child processes (raylet, workers) inherit the environment."""
    env = token_auth_env(environ)
    if local:
        env[LOOPBACK_ENV] = "0"
    environ.update(env)
    if environ is os.environ and "ray" in sys.modules:
        from ray._private import ray_constants
        from ray._raylet import Config

        Config.initialize("")  # Ray cached RAY_AUTH_MODE at import; reload it (Ray does the same when it enables it)
        if local:
            ray_constants.ENABLE_RAY_CLUSTER = False  # read at import too; services.get_node_ip_address reads this
    return env


def require_token_auth() -> None:
    """Fail if this process's Ray runs without token authentication (e.g. a sweep job under a Ray started without)."""
    from ray._raylet import AuthenticationMode, get_authentication_mode

    if get_authentication_mode() != AuthenticationMode.TOKEN:
        raise RuntimeError(
            f"this process's Ray runs without token authentication ({AUTH_MODE_ENV}="
            f"{os.environ.get(AUTH_MODE_ENV)!r}); start or join Ray with {AUTH_MODE_ENV}=token"
        )


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str
    ip: str
    port: int


def is_loopback(ip: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (::ffff:127.0.0.1); False for wildcard and real addresses."""
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def listening_sockets(root_pid: int) -> list[Listener]:
    """TCP/UDP sockets listening (TCP LISTEN, UDP bound) in a process and all its descendants."""
    import psutil

    root = psutil.Process(root_pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            name, conns = proc.name(), proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # a worker that exited while we looked
        for c in conns:
            if c.status == psutil.CONN_LISTEN or (c.type == 2 and c.laddr and not c.raddr):  # 2 = SOCK_DGRAM
                found.append(Listener(proc.pid, name, c.laddr.ip, c.laddr.port))
    return found


def exposed(listeners: list[Listener]) -> list[Listener]:
    """The listeners reachable from another machine (bound to a wildcard or a non-loopback address)."""
    return [x for x in listeners if not is_loopback(x.ip)]


def launcher_starts_local_ray(hydra_cfg, environ: MutableMapping[str, str] = os.environ) -> bool | None:
    """For hydra/launcher=ray: True if it starts a local Ray (init.address local or unset, no RAY_ADDRESS), False if
    it joins one; None for any other launcher (it starts no Ray; each job's init_ray secures its own)."""
    launcher = hydra_cfg.launcher
    if not str(launcher.get("_target_", "")).endswith("ray_launcher.RayLauncher"):
        return None
    return launcher.ray.init.get("address") in (None, "", "local") and not environ.get("RAY_ADDRESS")


class SecureRayLauncher(Callback):
    """Hydra callback: before a sweep's launcher calls ray.init, turn token auth on and keep a local Ray on loopback."""

    def on_multirun_start(self, config, **kwargs) -> None:
        local = launcher_starts_local_ray(config.hydra)
        if local is not None:
            secure_ray_environment(local=local)
