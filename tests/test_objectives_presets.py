"""conf/loss presets: valid LossConfigs named after their file, every key commented, each runs through policy_loss."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from marin_rl.objectives import batch_normalizer, policy_loss
from marin_rl.objectives.config import LossConfig

LOSS_DIR = Path(__file__).parents[1] / "conf" / "loss"
PRESETS = sorted(LOSS_DIR.glob("*.yaml"))
REQUIRED = {"dapo_global", "dapo_per_example", "grpo", "dr_grpo", "gspo", "rloo"}


def test_all_required_presets_exist():
    assert REQUIRED <= {p.stem for p in PRESETS}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_is_valid_commented_and_runs(path):
    text = path.read_text()
    assert text.startswith("#"), f"{path.name}: header comment with the source missing"
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "#" in line or line.rstrip().endswith(":"), f"{path.name}: uncommented key: {line!r}"
    cfg = LossConfig.model_validate(yaml.safe_load(text))
    assert cfg.name == path.stem
    # every field of the model appears in the file (configs are data: no hidden defaults)
    assert set(yaml.safe_load(text)) == set(LossConfig.model_fields)

    rng = np.random.default_rng(0)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    logp = rng.normal(-1, 0.1, mask.shape).astype(np.float32)
    loss, metrics = policy_loss(
        logp,
        logp - 0.01,
        logp - 0.02,
        np.array([1.0, -1.0], np.float32),
        mask,
        cfg,
        batch_normalizer(mask, cfg.fixed_budget),
        ref_logp=logp - 0.05,
        entropy=np.ones_like(logp),
    )
    assert np.isfinite(loss) and all(np.isfinite(v) for v in metrics.values())


def test_preset_choices_match_their_papers():
    load = {p.stem: LossConfig.model_validate(yaml.safe_load(p.read_text())) for p in PRESETS}
    assert (load["dapo_global"].clip_eps_low, load["dapo_global"].clip_eps_high) == (0.2, 0.28)
    assert load["dapo_global"].aggregation == "token_mean"
    assert load["dapo_global"].filter_zero_variance and load["dapo_global"].overlong.penalty
    assert load["dapo_per_example"].aggregation == "seq_mean_token_mean"
    assert load["dr_grpo"].advantage == "dr_grpo" and load["dr_grpo"].aggregation == "seq_mean_token_sum_norm"
    assert load["gspo"].ratio_level == "sequence" and load["gspo"].clip_eps_high < 1e-3
    assert load["rloo"].advantage == "rloo"


def test_dynamic_sampling_without_filtering_is_rejected():
    with pytest.raises(ValueError, match="filter_zero_variance"):
        LossConfig(name="x", filter_zero_variance=False, dynamic_sampling={"enabled": True})


def test_docs_table_matches_presets():
    """docs/objectives.md tells users which aggregation/advantage/ratio each preset uses: keep it true."""
    doc = (LOSS_DIR.parents[1] / "docs" / "objectives.md").read_text()
    preset_section = doc.split("## Presets", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in preset_section.splitlines()
        if line.startswith("| `")
    }
    for path in PRESETS:
        cfg = LossConfig.model_validate(yaml.safe_load(path.read_text()))
        row = [cell.strip() for cell in rows[cfg.name].split("|")[1:-1]]
        assert row[1] == cfg.advantage, cfg.name
        assert row[2].startswith(cfg.ratio_level), cfg.name
        assert row[4].startswith(f"`{cfg.aggregation}`"), cfg.name
