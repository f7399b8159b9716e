"""Compose conf/ the way launch.py does and validate it into a run spec, without starting anything."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from marin_rl.config.spec import build_run_spec

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def compose_spec(overrides: list[str]):
    """The RunSpec for these command-line overrides (the sweep-only `objective` key dropped, as the launcher does)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("objective", None)
    return build_run_spec(container)
