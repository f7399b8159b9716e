"""Export a marin-rl checkpoint as an HF model folder.

    python -m marin_rl.training.export --checkpoint RUN/checkpoints/step-0000100 --out OUT [--dtype bfloat16] [--overwrite]

--checkpoint may also be a checkpoints/ folder or a run folder: its latest finished checkpoint is used. The model is
rebuilt from the checkpoint's model_config.json (no run config needed); the tokenizer comes from that config.
--out may not be, contain or lie inside the checkpoint or a run folder (--overwrite deletes it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax

from marin_rl.models.hf_io import export_hf
from marin_rl.models.policy import load_policy_from_checkpoint
from marin_rl.training import checkpoint as ckpt
from marin_rl.training.checkpoint_manifest import CheckpointCorruptError
from marin_rl.training.export_target import UnsafeExportTarget, check_export_target


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or the latest one inside a checkpoints/ folder or a run folder."""
    path = Path(path)
    if ckpt.is_checkpoint(path):
        return path
    for folder in (path, path / "checkpoints"):
        latest = ckpt.latest_checkpoint(folder)
        if latest is not None:
            return latest
    raise FileNotFoundError(
        f"--checkpoint {path}: no finished marin-rl checkpoint there (nor in {path}/checkpoints)"
    )


def export_checkpoint(
    checkpoint: str | Path, out: str | Path, *, dtype: str | None = None, overwrite: bool = False
) -> Path:
    """Write the policy of `checkpoint` (rebuilt from its model_config.json) to the HF folder `out`."""
    path = resolve_checkpoint(checkpoint)
    check_export_target(out, path)  # before any work: --overwrite deletes --out
    model, tokenizer, _ = load_policy_from_checkpoint(path, dtype=dtype or "float32")
    return export_hf(model, tokenizer, out, overwrite=overwrite)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m marin_rl.training.export", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", required=True, help="checkpoint folder (or a checkpoints/ or run folder)"
    )
    parser.add_argument("--out", required=True, help="destination HF model folder")
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default=None, help="cast weights (default: as saved)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    args = parser.parse_args(argv)
    path = resolve_checkpoint(args.checkpoint)  # once: it verifies the files and reports any fallback
    out = export_checkpoint(path, args.out, dtype=args.dtype, overwrite=args.overwrite)
    print(f"exported {path} -> {out} (devices: {jax.devices()[0].platform})")
    return out


if __name__ == "__main__":
    try:
        main()
    except (FileNotFoundError, FileExistsError, UnsafeExportTarget, CheckpointCorruptError) as err:
        # a bad --checkpoint or --out: one line, not a traceback
        raise SystemExit(f"error: {err}") from None
