"""JAX's persistent compilation cache for every process of a run (hardware.compile_cache).

XLA compiles each jitted program of a run (trainer step per length bucket, sampler prefill and decode per shape)
before it first runs; on the CPU that is most of a short run's time. With the cache on, a process that needs a
program an earlier process compiled (a resumed run, the next trial of a sweep, a rerun with another seed) loads it
instead. JAX keys each program on its HLO, the compile options, XLA flags (device counts included), the backend
and the jax/jaxlib versions, so a changed model or mesh compiles anew; a loaded program is the compiled one, so
results are bit-identical (tests/test_compile_cache.py). A size limit turns on JAX's LRU eviction, which also
makes readers and writers of the folder take a file lock, so concurrent runs share it safely; an entry that cannot
be read (e.g. cut short by a crash) is compiled again, with a warning.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from marin_rl.config.paths import project_path
from marin_rl.config.spec import CompileCacheConfig

GIB = 2**30


def compile_cache_env(cfg: CompileCacheConfig) -> dict[str, str]:
    """The JAX settings (as environment variables, read when jax is imported) that turn the cache on; {} if off."""
    if cfg.dir is None:
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": str(project_path(cfg.dir)),
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(int(cfg.max_gb * GIB)),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(cfg.min_compile_s),
    }


def use_compile_cache(cfg: CompileCacheConfig, environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn the cache on for this process (mode=sft/eval/generate compile here) and the processes it starts."""
    env = compile_cache_env(cfg)
    environ.update(env)
    if not env:
        return
    import jax

    # jax may be imported already (it then read the environment before this call): set the live values too
    jax.config.update("jax_compilation_cache_dir", env["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_compilation_cache_max_size", int(env["JAX_COMPILATION_CACHE_MAX_SIZE"]))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", cfg.min_compile_s)


# JAX records this around each program it needs, whether it compiles it or loads it from the cache
PROGRAM_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


class ProgramCounter:
    """This process's XLA programs since it started counting: how many, how many the cache supplied, and the
    seconds spent getting them (compiling or loading)."""

    def __init__(self) -> None:
        self.programs, self.loaded, self.seconds = 0, 0, 0.0

    def on_duration(self, event: str, duration: float, **_) -> None:
        if event == PROGRAM_EVENT:
            self.programs += 1
            self.seconds += duration

    def on_event(self, event: str, **_) -> None:
        if event == CACHE_HIT_EVENT:
            self.loaded += 1

    def stats(self) -> dict[str, float]:
        return {"compiled": self.programs - self.loaded, "loaded": self.loaded, "seconds": round(self.seconds, 3)}


_COUNTER: ProgramCounter | None = None


def count_programs() -> ProgramCounter:
    """The process's one counter, listening from the first call on (call it before the process compiles)."""
    global _COUNTER
    if _COUNTER is None:
        import jax

        _COUNTER = ProgramCounter()
        jax.monitoring.register_event_duration_secs_listener(_COUNTER.on_duration)
        jax.monitoring.register_event_listener(_COUNTER.on_event)
    return _COUNTER


def total_programs(stats: list[dict[str, float]]) -> dict[str, float]:
    """The programs of several processes (a run's trainer and rollout workers) added up."""
    return {key: round(sum(s[key] for s in stats), 3) for key in ("compiled", "loaded", "seconds")}
