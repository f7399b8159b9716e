"""Environments: prompts with gold answers, rendering for a model, and grading into rewards.

`build_environment(env_cfg, seed)` turns the `env:` config node into one Environment (a MixtureEnvironment when
several components are configured). Environments know nothing about Ray or the trainer.
"""

from __future__ import annotations

from marin_rl.config.seeds import derive_seed
from marin_rl.environments.base import Environment, Problem, Score
from marin_rl.environments.classification import ClassificationEnvironment
from marin_rl.environments.config import EnvComponentConfig, EnvConfig, RewardConfig
from marin_rl.environments.data import DataUnavailableError, resolve_data_dir
from marin_rl.environments.data_envs import Gsm8kEnvironment, Math500Environment, build_dataset_environment
from marin_rl.environments.decontam import decontaminate_components
from marin_rl.environments.grading import LazyGradingPool
from marin_rl.environments.mixture import MixtureEnvironment
from marin_rl.environments.mock import MockEnvironment
from marin_rl.environments.mock_tasks import MOCK_TASKS


def build_component(
    config: EnvComponentConfig, env_data_dir: str | None, pool: LazyGradingPool, seed: int
) -> Environment:
    if config.kind == "mock":
        return MockEnvironment(config, seed)
    if config.kind == "classification":
        return ClassificationEnvironment(config, seed)
    data_dir = resolve_data_dir(config.data_dir, env_data_dir, config.kind)
    return build_dataset_environment(config, data_dir, pool, seed)


def build_environment(env_cfg: EnvConfig, seed: int) -> Environment:
    """The environment of a run: the single component, or a MixtureEnvironment named env_cfg.name.

    All math/gsm8k components share one grading pool, started on first use; `env.close()` stops it.
    """
    pool = LazyGradingPool(env_cfg.grading)
    components = [
        build_component(component, env_cfg.data_dir, pool, derive_seed(seed, "env-component", index))
        for index, component in enumerate(env_cfg.components)
    ]
    if env_cfg.decontam.enabled:
        decontaminate_components(components, env_cfg.decontam.ngram)
    if len(components) == 1:
        return components[0]
    return MixtureEnvironment(env_cfg.name, components, [c.weight for c in env_cfg.components], seed)


__all__ = [
    "MOCK_TASKS",
    "ClassificationEnvironment",
    "DataUnavailableError",
    "EnvConfig",
    "Environment",
    "Gsm8kEnvironment",
    "Math500Environment",
    "MixtureEnvironment",
    "MockEnvironment",
    "Problem",
    "RewardConfig",
    "Score",
    "build_component",
    "build_environment",
]
