"""hardware.compile_cache: JAX's persistent compilation cache, in real processes. A second process loads what the
first compiled and computes the same bits; a damaged entry is compiled again, not loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from marin_rl.config.paths import PROJECT_ROOT
from marin_rl.config.spec import CompileCacheConfig
from marin_rl.runtime.compile_cache import GIB, compile_cache_env

# A jitted program in a fresh interpreter; prints its result's bytes and the process's program counts (the ones
# the trainer and rollout workers report in summary.json).
PROGRAM = """
import json, jax, jax.numpy as jnp
from marin_rl.runtime.compile_cache import count_programs
programs = count_programs()
x = jax.random.normal(jax.random.PRNGKey(0), (64, 64))
y = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(axis=0) / 3.0)(x)
print(json.dumps({"result": y.tobytes().hex(), **programs.stats()}))
"""


def run_program(cache_dir: Path, **cfg_fields) -> tuple[dict, str]:
    cfg = CompileCacheConfig(dir=str(cache_dir), **cfg_fields)
    env = {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", **compile_cache_env(cfg)}
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*-cache"))


def test_a_second_process_loads_the_compiled_program_and_computes_the_same_bits(tmp_path):
    cache = tmp_path / "jax"
    first, _ = run_program(cache)
    assert first["compiled"] >= 1 and first["loaded"] == 0 and len(entries(cache)) == first["compiled"]  # stored
    second, _ = run_program(cache)
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"]  # loaded instead of compiled
    assert second["result"] == first["result"]


def test_a_damaged_entry_is_compiled_again_with_a_warning(tmp_path):
    cache = tmp_path / "jax"
    fresh, _ = run_program(cache)
    for entry in entries(cache):  # as if a crash cut every write short
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    again, stderr = run_program(cache)
    assert again["loaded"] == 0 and again["compiled"] == fresh["compiled"] and again["result"] == fresh["result"]
    assert "persistent compilation cache" in stderr  # said, not silent


def test_the_dir_is_relative_to_the_project_and_the_size_limit_is_in_gib(tmp_path):
    env = compile_cache_env(CompileCacheConfig(dir=".cache/jax", max_gb=0.5, min_compile_s=1.5))
    assert env == {
        "JAX_COMPILATION_CACHE_DIR": str(PROJECT_ROOT / ".cache/jax"),
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(GIB // 2),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "1.5",
    }
    assert compile_cache_env(CompileCacheConfig(dir=None)) == {}  # off: JAX's own default (no cache)
    assert compile_cache_env(CompileCacheConfig(dir=str(tmp_path)))["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path)


@pytest.mark.parametrize("min_compile_s, stored", [(0.0, True), (3600.0, False)])
def test_min_compile_s_keeps_fast_compiles_out(tmp_path, min_compile_s, stored):
    run_program(tmp_path / "jax", min_compile_s=min_compile_s)
    assert bool(entries(tmp_path / "jax")) is stored
