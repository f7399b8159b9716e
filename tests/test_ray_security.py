"""Ray is closed: token auth is on, the token file is private, a local Ray listens on loopback only, and a client
without the right token cannot join (marin_rl/runtime/ray_security.py, orchestration.init_ray)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from spec_helpers import CONF, ROOT

from marin_rl.runtime.ray_security import (
    AUTH_MODE_ENV,
    LOOPBACK_ENV,
    TOKEN_ENV,
    TOKEN_PATH_ENV,
    ensure_private_token,
    exposed,
    is_loopback,
    launcher_starts_local_ray,
    listening_sockets,
    secure_ray_environment,
    token_auth_env,
)

CLIENT = """
import sys, ray
ray.init(address=sys.argv[1])
print("RAN", ray.get(ray.remote(lambda: 7).remote()), flush=True)
"""
REFUSED = "InvalidAuthToken"  # what the GCS answers a client without the right token (Ray 2.60, measured)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_token_file_is_private_and_random(tmp_path):
    a, b = ensure_private_token(tmp_path / "a" / "tok"), ensure_private_token(tmp_path / "b" / "tok")
    assert mode(a) == 0o600 and mode(a.parent) == 0o700
    assert len(a.read_text()) == 64 and a.read_text() != b.read_text()


def test_runs_starting_together_share_one_complete_token(tmp_path):
    # two test workers (or sweep jobs) starting at once on a fresh machine: none may read a half-written token
    path = tmp_path / "ray" / "tok"
    with ThreadPoolExecutor(16) as pool:
        made = list(pool.map(lambda _: ensure_private_token(path).read_text(), range(64)))
    assert len(set(made)) == 1 and len(made[0]) == 64 and mode(path) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["tok"]  # no temporary files left behind


def test_a_world_readable_token_is_tightened_and_kept(tmp_path):
    path = tmp_path / "tok"
    path.write_text("s3cret")
    path.chmod(0o644)  # how Ray itself writes ~/.ray/auth_token
    ensure_private_token(path)
    assert mode(path) == 0o600 and path.read_text() == "s3cret"


def test_an_empty_token_file_is_an_error(tmp_path):
    (tmp_path / "tok").write_text("")
    with pytest.raises(RuntimeError, match="empty"):
        ensure_private_token(tmp_path / "tok")


@pytest.mark.parametrize("value", ["disabled", "none", ""])
def test_auth_mode_other_than_token_is_refused_naming_the_variable(value, tmp_path):
    with pytest.raises(ValueError, match=f"{AUTH_MODE_ENV}={value}:.*allowed: unset or 'token'"):
        token_auth_env({AUTH_MODE_ENV: value, TOKEN_PATH_ENV: str(tmp_path / "tok")})
    assert not (tmp_path / "tok").exists()


def test_token_env_uses_the_named_file_or_the_token_variable(tmp_path):
    env = {TOKEN_PATH_ENV: str(tmp_path / "tok")}
    assert secure_ray_environment(local=True, environ=env) == {AUTH_MODE_ENV: "token", LOOPBACK_ENV: "0"}
    assert env[AUTH_MODE_ENV] == "token" and mode(tmp_path / "tok") == 0o600
    joined = {TOKEN_ENV: "given", TOKEN_PATH_ENV: str(tmp_path / "other")}
    assert secure_ray_environment(local=False, environ=joined) == {AUTH_MODE_ENV: "token"}
    assert LOOPBACK_ENV not in joined and not (tmp_path / "other").exists()  # Ray reads RAY_AUTH_TOKEN first


@pytest.mark.parametrize(("ip", "loopback"), [
    ("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.2", False),
])
def test_is_loopback(ip, loopback):
    assert is_loopback(ip) is loopback


@pytest.mark.parametrize(("overrides", "environ", "local"), [
    (["hydra/launcher=ray"], {}, True),
    (["hydra/launcher=ray", "hydra.launcher.ray.init.address=auto"], {}, False),
    (["hydra/launcher=ray"], {"RAY_ADDRESS": "10.0.0.1:6379"}, False),
    ([], {}, None),  # the basic launcher starts no Ray; each job's init_ray secures its own
])
def test_the_sweep_callback_knows_whether_the_launcher_starts_a_local_ray(overrides, environ, local):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["recipe=quickstart", *overrides], return_hydra_config=True)
    assert cfg.hydra.callbacks.ray_security._target_ == "marin_rl.runtime.ray_security.SecureRayLauncher"
    assert launcher_starts_local_ray(cfg.hydra, environ) is local


def without_ray_auth(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (AUTH_MODE_ENV, TOKEN_ENV, TOKEN_PATH_ENV, "RAY_ADDRESS")}
    return {**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", **extra}


def start_client(gcs: str, log: Path, **env: str) -> subprocess.Popen:
    # LOOPBACK_ENV: without it Ray rewrites 127.0.0.1 to the machine's external address and dials that
    return subprocess.Popen([sys.executable, "-c", CLIENT, gcs], cwd=ROOT, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, env=without_ray_auth(**{LOOPBACK_ENV: "0", **env}))


def wait_for_text(log: Path, text: str, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and text not in log.read_text() and proc.poll() is None:
        time.sleep(0.5)
    return log.read_text()


@pytest.mark.timeout(240)
def test_the_run_ray_listens_on_loopback_and_refuses_clients_without_the_token(tmp_path):
    token = tmp_path / "token" / "auth_token"  # not there yet: init_ray makes it
    head = subprocess.Popen([sys.executable, str(ROOT / "tests" / "ray_head.py"), str(tmp_path / "run")], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=without_ray_auth(**{TOKEN_PATH_ENV: str(token)}), start_new_session=True)
    clients = []
    try:
        line = head.stdout.readline()
        assert line.startswith("GCS "), f"head exited {head.poll()}: {line}"
        gcs = line.split()[1]
        assert mode(token) == 0o600

        listeners = listening_sockets(head.pid)
        names = {x.process for x in listeners}
        assert {"gcs_server", "raylet"} <= names, listeners
        assert int(gcs.rsplit(":", 1)[1]) in {x.port for x in listeners}
        assert exposed(listeners) == [], exposed(listeners)

        home = tmp_path / "home"  # no ~/.ray/auth_token to fall back on
        home.mkdir()
        logs = {k: tmp_path / f"{k}.log" for k in ("none", "wrong", "right")}
        clients = [
            none := start_client(gcs, logs["none"], HOME=str(home)),
            wrong := start_client(gcs, logs["wrong"], HOME=str(home), **{AUTH_MODE_ENV: "token", TOKEN_ENV: "0" * 64}),
            right := start_client(gcs, logs["right"], **{AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(token)}),
        ]
        assert right.wait(timeout=120) == 0, logs["right"].read_text()[-2000:]
        assert "RAN 7" in logs["right"].read_text()
        for proc, key in ((none, "none"), (wrong, "wrong")):
            out = wait_for_text(logs[key], REFUSED, proc, timeout=60)
            assert REFUSED in out and "RAN" not in out, out[-2000:]
    finally:
        for proc in clients:
            proc.kill()
            proc.wait()
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, 9)
            head.wait()


@pytest.mark.timeout(600)
def test_a_sweep_through_the_ray_launcher_runs_with_token_auth(tmp_path):
    """hydra/launcher=ray: the callback turns token auth on before the launcher starts Ray; the job's init_ray
    fails unless its Ray runs in token mode, so a completed job is one that ran with authentication on."""
    from e2e import SHORT_RUN, run_env, summary

    token, log = tmp_path / "token", tmp_path / "sweep.log"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "launch.py"), "-m", "hydra/launcher=ray", *SHORT_RUN, "train.steps=1",
         "sft.warmstart=false", "train.eval_prompts=4", "seed=0", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=ROOT, env={**without_ray_auth(), **{k: v for k, v in run_env().items() if k.startswith(("WANDB", "HF"))},
                       TOKEN_PATH_ENV: str(token)},
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    seen, open_ports = set(), set()
    try:
        deadline = time.monotonic() + 560
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                listeners = listening_sockets(proc.pid)  # the launcher's Ray, the job, its actors
            except psutil.NoSuchProcess:
                break
            seen |= {x.process for x in listeners}
            open_ports |= set(exposed(listeners))
            time.sleep(2)
        assert proc.wait(timeout=5) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert "gcs_server" in seen and not open_ports, (seen, open_ports)
    assert mode(token) == 0o600  # made by the callback in the launcher's process, before its ray.init
    assert summary(tmp_path / "sweep" / "0")["status"] == "completed"
