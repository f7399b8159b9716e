"""Sweep configs compose as intended (Optuna search, Ray launcher) and the sweep objective is found; no runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep
from omegaconf import OmegaConf

from marin_rl.launcher import (
    DEFAULT_OBJECTIVE,
    lookup_metric,
    numeric_metrics,
    objective_value,
    spec_from_hydra,
)

CONF = Path(__file__).resolve().parents[1] / "conf"


def compose_with_hydra(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def compose_job(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def parse_sweep(key: str, value: str):
    return OverridesParser.create().parse_override(f"{key}={value}").value()


def test_optuna_search_composes_with_a_tpe_sampler_and_the_objective():
    cfg = compose_with_hydra(["recipe=quickstart", "hparams_search=lr_batch_optuna"])
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    assert sweeper.direction == "maximize"
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler"
    assert 0 < sweeper.sampler.n_startup_trials < sweeper.n_trials
    assert set(sweeper.params) == {"optimizer.lr", "train.batch_size"}
    assert cfg.hydra.mode.name == "MULTIRUN"
    assert cfg.objective == DEFAULT_OBJECTIVE

    lr = parse_sweep("optimizer.lr", sweeper.params["optimizer.lr"])
    assert isinstance(lr, IntervalSweep) and "log" in lr.tags
    assert 0 < lr.start < lr.end


def test_every_batch_size_choice_makes_a_valid_run_and_the_objective_is_popped():
    cfg = compose_with_hydra(["recipe=quickstart", "hparams_search=lr_batch_optuna"])
    choices = parse_sweep("train.batch_size", cfg.hydra.sweeper.params["train.batch_size"])
    assert isinstance(choices, ChoiceSweep) and len(choices.list) >= 2
    lr = parse_sweep("optimizer.lr", cfg.hydra.sweeper.params["optimizer.lr"])
    for batch_size in choices.list:
        job = compose_job([
            "recipe=quickstart", "hparams_search=lr_batch_optuna",
            f"train.batch_size={batch_size}", f"optimizer.lr={lr.end}",
        ])
        spec, objective = spec_from_hydra(job)  # exits on an invalid spec (e.g. not a multiple of n_generations)
        assert objective == job.objective
        assert spec.train.batch_size == batch_size


def test_no_search_means_no_objective():
    _, objective = spec_from_hydra(compose_job(["recipe=quickstart"]))
    assert objective is None


@pytest.mark.parametrize("choice", ["ray", "ray_local"])
def test_ray_launcher_config_is_safe_on_one_machine(choice):
    """`hydra/launcher=ray` (the issue's command) gets our config, not the plugin default whose 1-CPU job tasks
    would hold every CPU of a small machine while the jobs' actors wait for theirs."""
    cfg = compose_with_hydra([f"hydra/launcher={choice}", "recipe=quickstart"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
    assert cfg.hydra.runtime.choices["hydra/launcher"] == choice
    init, remote = launcher.ray.init, launcher.ray.remote
    assert init.address == "local" and init._node_ip_address == "127.0.0.1" and init.include_dashboard is False
    # Present (as null) so the plugin's setdefault does not cap the object store at 75 MB.
    assert "object_store_memory" in init and init.object_store_memory is None
    # The job task takes no CPU (its actors' placement group does) and gets a fresh process per job.
    assert remote.num_cpus == 0 and remote.max_calls == 1
    OmegaConf.to_container(launcher, resolve=True)  # every interpolation resolves


SUMMARY = {
    "status": "completed",
    "steps": 2,
    "eval_after_rl": {"pass_at_1": 0.25, "pass_at_1_source": "sampled", "by_task": {"add": {"pass_at_1": 0.5}}},
    "ok": True,
}


@pytest.mark.parametrize(
    ("dotted", "expected"),
    [("eval_after_rl.pass_at_1", 0.25), ("eval_after_rl.by_task.add.pass_at_1", 0.5), ("steps", 2.0)],
)
def test_lookup_metric_finds_dotted_numbers(dotted, expected):
    assert lookup_metric(SUMMARY, dotted) == expected


@pytest.mark.parametrize("dotted", ["eval_after_rl.pass_at_2", "eval_after_rl", "eval_after_rl.pass_at_1_source",
                                    "ok", "status.x", "eval_before_rl.pass_at_1"])
def test_lookup_metric_is_none_for_missing_or_non_numeric(dotted):
    assert lookup_metric(SUMMARY, dotted) is None


def test_a_named_objective_must_exist(tmp_path):
    assert objective_value(SUMMARY, "eval_after_rl.pass_at_1", DEFAULT_OBJECTIVE, tmp_path) == 0.25
    assert objective_value(SUMMARY, None, DEFAULT_OBJECTIVE, tmp_path) == 0.25
    assert objective_value(SUMMARY, None, "eval.pass_at_1", tmp_path) is None
    with pytest.raises(KeyError, match="eval_after_rl.pass_at1.*eval_after_rl.by_task.add.pass_at_1"):
        objective_value(SUMMARY, "eval_after_rl.pass_at1", DEFAULT_OBJECTIVE, tmp_path)
    assert numeric_metrics(SUMMARY) == ["steps", "eval_after_rl.pass_at_1", "eval_after_rl.by_task.add.pass_at_1"]
