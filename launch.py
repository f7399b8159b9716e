"""marin-rl launcher: `python launch.py [group=option ...] [key=value ...]`.

Composes the Hydra config groups in conf/ (and a recipe from recipes/), validates them into one run spec, and
runs it: an RL run on Ray actors (mode=rl), a supervised warm-start (mode=sft), synthetic-data generation
(mode=generate) or an evaluation (mode=eval). `dry_run=true` only validates and prints the plan.
Sweeps: `python launch.py -m optimizer.lr=1e-4,3e-4 seed=0,1,2`. Hydra's own help: `python launch.py --hydra-help`.
"""

import warnings

import hydra
from omegaconf import DictConfig

# conf/hydra/launcher/ray.yaml deliberately takes the place of the Ray plugin's config of the same name (its header
# says why); Hydra 1.3 validates it against the plugin's schema, as wanted, and warns that matching by name is old.
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/ray' is validated against ConfigStore schema")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from marin_rl.launcher import run_from_hydra

    return run_from_hydra(cfg)


if __name__ == "__main__":
    main()
