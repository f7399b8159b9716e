"""marin-rl against the tools users would pick instead, side by side on the same random weights: one table.

    make bench-peers                                  # builds .venv-peers once, then runs this with .venv
    .venv/bin/python bench/peers.py --peers-python .venv-peers/bin/python [--out bench/results]

Steps (each side in its own subprocess; peer scripts run in .venv-peers and never import marin_rl):
1. export random tiny Llamas of ~0.15M, ~4M and ~20M parameters with marin_rl.models.hf_io.export_hf;
2. sampler tokens/s: bench/peers_ours_sampler.py (our Sampler) vs bench/peers_hf_generate.py (HF generate),
   batch 32 x 128 new tokens, EOS not a stop on either side; ours once more with the rows split over 2 simulated
   CPU devices (hardware.rollout_mesh.data=2, --sampler-rows-split) and once with the weights split over 2
   (hardware.rollout_mesh.model=2, tensor parallel, --sampler-weights-split);
3. RL steps/s and sampled tokens/s: `launch.py recipe=quickstart` with overrides (GRPO without KL, no SFT,
   4 prompts x 8 generations, 32 new tokens, weights from the export) vs bench/peers_trl_grpo.py (TRL
   GRPOTrainer, same settings, the same mock reverse task and exact-match reward), mean answer lengths reported;
   ours once in rollout.mode=sync (on-policy, as TRL) and once in rollout.mode=one_step_off (sampling pipelined
   with training, rollouts one version old: a different algorithm, so its own row); at --rl-weights-split-sizes
   (4M) once more in sync mode with the sampler's weights over 2 CPU devices (hardware.rollout_mesh.model=2);
4. weight sync: bench/peers_weight_sync.py (object store, shared-memory and file channels: publish + fetch vs a memcpy);
5. in-flight vs sync on a task where generation dominates: the same launch.py run with rollout.mode=sync, =inflight
   and =one_step_off, few rows (1 prompt x 4 answers) and longer answers (<= 96 tokens), wall time for equal steps.
RL runs (and the runs of 5) in --rl-rounds rounds, each round one run of every variant of ours and one TRL run, the
side that goes first alternating by round and size; the sampler in --sampler-rounds rounds, each round every sampler script
once, the order reversed every other round. A ratio is the median of the rounds' ratios (each round's pair ran
minutes apart); its row lists every round's. The table goes to stdout and to
--out/peers-<UTC time>.md, the raw JSON rows to peers-<UTC time>.json, subprocess logs to peers-<UTC time>/.
Ratios are the claim: absolute times move with whatever else runs on the machine. `--parts` runs a subset
(e.g. `--parts inflight`); the table then has only those rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

# name -> tiny-Llama shape (conf/model/tiny.yaml fields); vocab = the char tokenizer's 100 tokens
SIZES = {
    "0.15M": {"hidden_dim": 64, "intermediate_dim": 256, "num_layers": 2, "num_heads": 4},  # = conf/model/tiny
    "4M": {"hidden_dim": 256, "intermediate_dim": 1024, "num_layers": 4, "num_heads": 4},
    "20M": {"hidden_dim": 512, "intermediate_dim": 1536, "num_layers": 6, "num_heads": 8},
}
OVERLAPPED_MODES = ("inflight", "one_step_off")  # timed against sync in the generation-dominated pair (part 5)
PARTS = ("sampler", "rl", "weight-sync", "inflight")
RUN_LABELS = {"ours": "sync", "one_step_off": "one-step-off", "weights_split": "weights-split"}  # RL run folders
SAMPLER_PROMPTS = ["2+2=", "Hello there", "12*3=", "abc", "What is 7-5?", "x", "The answer is", "9/3"]


def parse_json_lines(text: str) -> list[dict]:
    """The JSON objects among a subprocess's stdout lines (libraries may print other lines)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def ours_rl_rates(rows: list[dict], warmup: int) -> dict:
    """Steady-state rates of a marin-rl run from its metrics.jsonl rows: steps after step `warmup` over the
    wall clock (`time_s`) between the end of step `warmup` and the end of the last step."""
    by_step = {int(r["step"]): r for r in rows if "step" in r and "time_s" in r}
    last = max(by_step)
    if warmup not in by_step or last <= warmup:
        raise ValueError(f"need metrics rows for step {warmup} and later steps; got steps {sorted(by_step)}")
    timed = [by_step[s] for s in range(warmup + 1, last + 1) if s in by_step]
    seconds = by_step[last]["time_s"] - by_step[warmup]["time_s"]
    steps = last - warmup
    sample_s = sum(r.get("time/sample_s", 0.0) for r in timed)
    train_s = sum(r.get("time/train_step_s", 0.0) for r in timed)
    return {
        "timed_steps": steps,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "sampled_tokens_per_s": sum(r.get("throughput/sampled_tokens", 0) for r in timed) / seconds,
        "mean_answer_len": sum(r["rollout/response_len_mean"] for r in timed) / len(timed),
        "sample_s_per_step": sample_s / steps,
        "train_s_per_step": train_s / steps,
        "generation_share": sample_s / (sample_s + train_s) if sample_s + train_s else 0.0,  # sync: of the step's work
        "max_staleness": max(r.get("replay/max_staleness_used", 0) for r in timed),  # versions behind, per token
    }


def ratio(a: float | None, b: float | None) -> str:
    """a / b as 'x.xx' (or '-' when either side is missing)."""
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}"


def fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


class Runner:
    """Runs one side's subprocess, keeps its log, returns its JSON rows (an empty list on failure, noted)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.failures: list[str] = []

    def run(self, name: str, cmd: list[str], env: dict[str, str]) -> list[dict]:
        print(f"[bench-peers] {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        log = self.log_dir / f"{name}.log"
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-3:]
            self.failures.append(f"{name}: exit {proc.returncode} ({log}): {' | '.join(tail)}")
            print(f"[bench-peers] {name} FAILED, see {log}", file=sys.stderr, flush=True)
            return []
        return parse_json_lines(proc.stdout)


def ours_env() -> dict[str, str]:
    """The main venv's environment with this checkout first on the import path (Ray actors inherit it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("WANDB_MODE", "disabled")
    return env


def peers_env() -> dict[str, str]:
    """The environment for .venv-peers scripts: no PYTHONPATH, so marin_rl cannot leak in."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def export_models(out: Path, seed: int, max_seq_len: int) -> dict[str, str]:
    """Random tiny Llamas (run seed `seed`) written as HF folders by the project's exporter; name -> folder."""
    import jax

    from marin_rl.config.seeds import jax_key
    from marin_rl.config.spec import ModelConfig
    from marin_rl.models.hf_io import export_hf
    from marin_rl.models.policy import build_policy

    folders = {}
    for name, shape in SIZES.items():
        cfg = ModelConfig(name=f"bench-{name}", kind="tiny", max_seq_len=max_seq_len, **shape)
        model, tok, _ = build_policy(cfg, jax_key(seed, "bench-peers", "init"))
        folders[name] = str(export_hf(model, tok, out / name, overwrite=True))
        print(f"[bench-peers] exported {name} -> {folders[name]} ({jax.devices()[0]})", file=sys.stderr, flush=True)
    return folders


def write_inputs(out: Path, seed: int, n_problems: int, rows: int) -> tuple[Path, Path]:
    """prompts.json (sampler prompt token ids) and problems.jsonl (the mock reverse task, rendered) for both sides."""
    import yaml

    from marin_rl.config.seeds import numpy_rng
    from marin_rl.environments import build_environment
    from marin_rl.environments.config import EnvConfig
    from marin_rl.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    prompts = out / "prompts.json"
    prompts.write_text(json.dumps({
        "prompt_ids": [tok(p)["input_ids"] for p in SAMPLER_PROMPTS],
        "n": rows // len(SAMPLER_PROMPTS),
        "pad_id": tok.pad_token_id,
    }))
    env = build_environment(EnvConfig(**yaml.safe_load((ROOT / "conf/env/mock_reverse.yaml").read_text())), seed)
    problems = out / "problems.jsonl"
    with problems.open("w") as handle:
        for p in env.sample(n_problems, numpy_rng(seed, "bench-peers", "problems")):
            handle.write(json.dumps({"prompt": env.render(p), "gold": p.gold}) + "\n")
    return prompts, problems


def launch_overrides(args, folder: str, shape: dict, run_dir: Path, steps: int, batch: tuple[int, int],
                     new_tokens: int, mode: str, extra: tuple[str, ...] = ()) -> list[str]:
    """launch.py overrides: the quickstart recipe as an RL-only GRPO run of the exported weights; `batch` =
    (prompts per step, answers per prompt)."""
    prompts, generations = batch
    return [
        "recipe=quickstart", "sft.warmstart=false", "loss=grpo", "loss.kl.coef=0",
        f"train.batch_size={prompts * generations}", f"rollout.n_generations={generations}",
        f"sampler.max_new_tokens={new_tokens}", f"train.steps={steps}", "train.checkpoint_every=0",
        f"train.eval_prompts={args.eval_prompts}", f"rollout.mode={mode}", f"optimizer.lr={args.lr}",
        f"seed={args.seed}", "tracking.plots=false", "tracking.progress=false", "tracking.wandb_mode=disabled",
        f"model.init_checkpoint={folder}", "model.max_seq_len=128",
        *(f"model.{key}={value}" for key, value in shape.items()),
        f"model.num_kv_heads={shape['num_heads']}",
        f"hydra.run.dir={run_dir}", *extra,
    ]


def ours_rl(runner: Runner, args, name: str, folder: str, run_dir: Path, steps: int, batch: tuple[int, int],
            new_tokens: int, mode: str, extra: tuple[str, ...] = ()) -> dict | None:
    """One launch.py run (`extra`: more overrides); its steady-state rates from metrics.jsonl (None if it failed)."""
    cmd = [sys.executable, "launch.py",
           *launch_overrides(args, folder, SIZES[name], run_dir, steps, batch, new_tokens, mode, extra)]
    runner.run(run_dir.name, cmd, ours_env())
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        runner.failures.append(f"{run_dir.name}: no {metrics}")
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return ours_rl_rates(rows, args.warmup)


def trl_rl(runner: Runner, args, name: str, folder: str, problems: Path, out: Path, rnd: int) -> dict | None:
    cmd = [
        args.peers_python, str(BENCH / "peers_trl_grpo.py"), "--model", folder, "--problems", str(problems),
        "--steps", str(args.trl_steps), "--warmup", str(args.warmup), "--prompts-per-step",
        str(args.prompts_per_step), "--generations", str(args.generations), "--max-new-tokens",
        str(args.rl_new_tokens), "--lr", str(args.lr), "--seed", str(args.seed), "--out", str(out / f"trl-{name}-r{rnd}"),
    ]
    rows = runner.run(f"trl-{name}-r{rnd}", cmd, peers_env())
    return rows[-1] if rows else None


def run_sampler(runner, label: str, python: str, script: str, flags: list[str], folders: list, env) -> dict:
    """{model size: JSON row} of one sampler script run over every model folder."""
    return {Path(row["folder"]).name: row
            for row in runner.run(label, [python, str(BENCH / script), *flags, *map(str, folders)], env)}


def round_median(runs: list[dict | None], key: str) -> float | None:
    """The median of `key` over the rounds whose run finished (None if none did)."""
    values = [run[key] for run in runs if run is not None]
    return statistics.median(values) if values else None


def paired_ratios(ours: list[dict | None], peer: list[dict | None], key: str) -> list[float]:
    """ours / peer of `key` per round, for the rounds where both sides finished."""
    return [o[key] / p[key] for o, p in zip(ours, peer) if o is not None and p is not None and p[key]]


def rounds_line(measure: str, name: str, ours: list[dict | None], peer: list[dict | None], key: str, notes: str,
                digits: int = 0) -> str:
    """One table row: medians of `key` over the rounds on each side, and the median of the per-round ratios with
    every round's."""
    o, p = round_median(ours, key), round_median(peer, key)
    per_round = paired_ratios(ours, peer, key)
    r = f"{statistics.median(per_round):.2f}" if per_round else "-"
    rounds = ", ".join(f"{x:.2f}" for x in per_round) or "-"
    return f"| {measure} | {name} | {fmt(o, digits)} | {fmt(p, digits)} | {r} | rounds {rounds}; {notes} |"


def sampler_line(what: str, name: str, ours: list[dict | None], hf: list[dict | None], notes: str) -> str:
    """One table row of sampler tokens/s, a variant of ours against HF generate."""
    return rounds_line(f"sampler tokens/s ({what})", name, ours, hf, "tokens_per_s", notes)


def rl_line(what: str, name: str, ours: list[dict | None], trl: list[dict | None], notes: str,
            key: str = "steps_per_s", unit: str = "steps/s", digits: int = 2) -> str:
    """One table row of an RL rate, a variant of ours against TRL's sync run."""
    return rounds_line(f"RL {unit} ({what} / TRL GRPOTrainer)", name, ours, trl, key, notes, digits)


def table(res: dict, args) -> str:
    """The markdown table of every measurement (ratios are ours / peer unless the row says otherwise)."""
    lines = [
        "| measurement | size | ours | peer | ratio | notes |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    hf = res["sampler"]["hf"]
    for name, o in res["sampler"]["ours"].items():
        chunk = next((run["decode_chunk"] for run in o if run is not None), None)
        lines.append(sampler_line(
            "ours / HF generate", name, o, hf[name],
            f"{args.rows} rows x {args.new_tokens} new tokens, mean length {fmt(round_median(o, 'mean_len'))} / "
            f"{fmt(round_median(hf[name], 'mean_len'))}; decode chunks of {chunk} steps",
        ))
    for name, o in res["sampler"]["ours_rows_split"].items():
        lines.append(sampler_line(
            f"ours, rows over {args.sampler_rows_split} CPU devices / HF generate", name, o, hf[name],
            f"hardware.rollout_mesh.data={args.sampler_rows_split}: one simulated device per core, same rows",
        ))
    for name, o in res["sampler"]["ours_weights_split"].items():
        lines.append(sampler_line(
            f"ours, weights over {args.sampler_weights_split} CPU devices / HF generate", name, o, hf[name],
            f"hardware.rollout_mesh.model={args.sampler_weights_split}: heads, MLP width and vocabulary split "
            "(tensor parallel), same rows",
        ))
    for name, o in res["rl"]["ours"].items():
        t = res["rl"]["trl"][name]
        lines.append(rl_line(
            "ours", name, o, t,
            f"{args.prompts_per_step} prompts x {args.generations}, <= {args.rl_new_tokens} new tokens, "
            f"{fmt(round_median(o, 'timed_steps'))} / {fmt(round_median(t, 'timed_steps'))} timed steps a run",
        ))
        lines.append(rl_line(
            "ours", name, o, t,
            f"mean answer length {fmt(round_median(o, 'mean_answer_len'), 1)} / "
            f"{fmt(round_median(t, 'mean_answer_len'), 1)}", key="sampled_tokens_per_s", unit="sampled tokens/s",
            digits=0,
        ))
        if name in res["rl"]["one_step_off"]:
            p = res["rl"]["one_step_off"][name]
            lines.append(rl_line(
                "ours one_step_off", name, p, t,
                f"ours sampled one version behind (max staleness {fmt(round_median(p, 'max_staleness'))}), TRL "
                f"on-policy; train {fmt(round_median(p, 'train_s_per_step'), 3)} s/step overlapping sample "
                f"{fmt(round_median(p, 'sample_s_per_step'), 3)} s/step",
            ))
        if name in res["rl"]["weights_split"]:
            p = res["rl"]["weights_split"][name]
            lines.append(rl_line(
                f"ours, sampler weights over {args.rl_weights_split} CPU devices", name, p, t,
                f"sync (on-policy, as TRL), hardware.rollout_mesh.model={args.rl_weights_split}; sample "
                f"{fmt(round_median(p, 'sample_s_per_step'), 3)} s + train "
                f"{fmt(round_median(p, 'train_s_per_step'), 3)} s per step",
            ))
    for name, w in res["weight_sync"].items():
        for channel in ("object_store", "shared_memory", "files"):
            total = w[f"{channel}_publish_s"] + w[f"{channel}_fetch_s"]
            lines.append(
                f"| weight sync s, {channel} publish+fetch (ours / numpy memcpy) | {name} | {total:.4f} "
                f"| {w['memcpy_s']:.4f} | {ratio(total, w['memcpy_s'])} | {w['nbytes'] / 2**20:.1f} MiB; publish "
                f"{w[f'{channel}_publish_s']:.4f} s + fetch {w[f'{channel}_fetch_s']:.4f} s, checksums included |"
            )
    sync = res["inflight"].get("sync")
    for mode in OVERLAPPED_MODES:
        if mode not in res["inflight"]:
            continue
        lines.append(rounds_line(
            f"wall s for equal steps ({mode} / sync)", args.inflight_size, res["inflight"][mode], sync, "seconds",
            f"{fmt(round_median(sync, 'timed_steps'))} steps, {args.inflight_prompts_per_step} prompts x "
            f"{args.inflight_generations}, <= {args.inflight_new_tokens} new tokens; sync run: sample "
            f"{fmt(round_median(sync, 'sample_s_per_step'), 3)} s + train {fmt(round_median(sync, 'train_s_per_step'), 3)} "
            f"s per step (generation {fmt(round_median(sync, 'generation_share'), 2)} of it); {mode} run: sample "
            f"{fmt(round_median(res['inflight'][mode], 'sample_s_per_step'), 3)} s, train "
            f"{fmt(round_median(res['inflight'][mode], 'train_s_per_step'), 3)} s per step, overlapping",
            digits=2,
        ))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers-python", default=str(ROOT / ".venv-peers/bin/python"), help="the peers venv's python")
    ap.add_argument("--out", default=str(BENCH / "results"), help="folder for the table, JSON rows and logs")
    ap.add_argument("--seed", type=int, default=0, help="run seed: model init, task draws, sampling")
    ap.add_argument("--rows", type=int, default=32, help="sampler rows (a multiple of 8 prompts)")
    ap.add_argument("--new-tokens", type=int, default=128, help="sampler new tokens per row")
    ap.add_argument("--repeats", type=int, default=2, help="sampler timings per side after warm-up (best kept)")
    ap.add_argument("--sampler-rounds", type=int, default=2,
                    help="sampler rounds: each runs every sampler variant once (ratios: the median of the rounds')")
    ap.add_argument("--sampler-rows-split", type=int, default=2,
                    help="also time our sampler with its rows split over this many simulated CPU devices "
                    "(hardware.rollout_mesh.data; 1 = leave that row out)")
    ap.add_argument("--sampler-weights-split", type=int, default=2,
                    help="also time our sampler with its weights split over this many simulated CPU devices "
                    "(hardware.rollout_mesh.model, tensor parallel; 1 = leave that row out)")
    ap.add_argument("--prompts-per-step", type=int, default=4, help="RL prompts per step")
    ap.add_argument("--generations", type=int, default=8, help="RL answers per prompt")
    ap.add_argument("--rl-new-tokens", type=int, default=32, help="RL answer cap")
    ap.add_argument("--rl-sizes", nargs="+", default=["0.15M", "4M"], choices=list(SIZES))
    ap.add_argument("--one-step-off", action=argparse.BooleanOptionalAction, default=True,
                    help="also run ours in rollout.mode=one_step_off, in the RL rows and in the in-flight pair "
                    "(its own rows: rollouts one version old)")
    ap.add_argument("--rl-weights-split", type=int, default=2,
                    help="hardware.rollout_mesh.model of the extra sync RL run at --rl-weights-split-sizes")
    ap.add_argument("--rl-weights-split-sizes", nargs="*", default=["4M"], choices=list(SIZES),
                    help="RL sizes that also run with the sampler's weights split (none: leave the row out)")
    ap.add_argument("--ours-steps", type=int, default=10, help="marin-rl RL steps per run")
    ap.add_argument("--trl-steps", type=int, default=10, help="TRL steps per run (as many as ours by default)")
    ap.add_argument("--rl-rounds", type=int, default=2,
                    help="RL rounds: each runs every variant of ours and TRL once per size (ratios: their median)")
    ap.add_argument("--warmup", type=int, default=2, help="first RL steps left out of the timing (compiles)")
    ap.add_argument("--lr", type=float, default=7e-4, help="RL learning rate, both sides (the quickstart's)")
    ap.add_argument("--eval-prompts", type=int, default=8, help="marin-rl's eval before/after RL (outside timing)")
    ap.add_argument("--weight-sync-sizes", nargs="+", default=["4M", "20M"], choices=list(SIZES),
                    help="models whose weights the weight-sync rows move")
    ap.add_argument("--inflight-size", default="4M", choices=list(SIZES),
                    help="model of the in-flight vs sync pair")
    ap.add_argument("--inflight-steps", type=int, default=10)
    ap.add_argument("--inflight-prompts-per-step", type=int, default=1,
                    help="prompts per step of the in-flight vs sync runs (few rows: decoding is latency-bound)")
    ap.add_argument("--inflight-generations", type=int, default=4, help="answers per prompt of those runs")
    ap.add_argument("--inflight-new-tokens", type=int, default=96,
                    help="answer cap of those runs (at 4M, 1 x 4 rows and 96 tokens, generation was ~70%% of a sync "
                    "step: docs/benchmarks.md \"Stop 38\")")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                    help="which measurements to run (default all): sampler, rl, weight-sync, inflight")
    args = ap.parse_args()
    for flag, rounds in (("--rl-rounds", args.rl_rounds), ("--sampler-rounds", args.sampler_rounds)):
        if rounds < 1:
            raise SystemExit(f"{flag} {rounds}: at least 1 (each round runs every variant once)")
    if {"sampler", "rl"} & set(args.parts) and not Path(args.peers_python).exists():  # the parts with peers
        raise SystemExit(f"--peers-python {args.peers_python} not found: build it with `make bench-peers`")

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out).resolve() / f"peers-{stamp}"
    out.mkdir(parents=True)
    runner = Runner(out)
    folders = export_models(out / "models", args.seed, max_seq_len=256)
    prompts, problems = write_inputs(out, args.seed, n_problems=4 * args.prompts_per_step * args.trl_steps,
                                     rows=args.rows)
    ordered = [folders[name] for name in SIZES]
    res: dict = {"args": vars(args), "stamp": stamp, "host": platform.node(), "cpus": os.cpu_count(),
                 "sampler": {"ours": {}, "ours_rows_split": {}, "ours_weights_split": {}, "hf": {}},
                 "rl": {"ours": {}, "one_step_off": {}, "weights_split": {}, "trl": {}}, "weight_sync": {}, "inflight": {}}

    sampler_flags = ["--prompts", str(prompts), "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats)]
    sampler_runs = {  # result key -> (label, python, script, extra flags, environment)
        "ours": ("sampler-ours", sys.executable, "peers_ours_sampler.py", [], ours_env()),
        "hf": ("sampler-hf", args.peers_python, "peers_hf_generate.py", [], peers_env()),
    }
    if args.sampler_rows_split > 1:
        sampler_runs["ours_rows_split"] = ("sampler-ours-rows-split", sys.executable, "peers_ours_sampler.py",
                                           ["--rows-split", str(args.sampler_rows_split)], ours_env())
    if args.sampler_weights_split > 1:
        sampler_runs["ours_weights_split"] = ("sampler-ours-weights-split", sys.executable, "peers_ours_sampler.py",
                                              ["--weights-split", str(args.sampler_weights_split)], ours_env())
    for key in sampler_runs:
        res["sampler"][key] = {name: [] for name in SIZES} if "sampler" in args.parts else {}
    for r in range(args.sampler_rounds if "sampler" in args.parts else 0):
        keys = list(sampler_runs)
        for key in (keys if r % 2 == 0 else keys[::-1]):  # alternate which side goes first
            label, python, script, extra, env = sampler_runs[key]
            rows = run_sampler(runner, f"{label}-r{r}", python, script, [*sampler_flags, *extra], ordered, env)
            for name in SIZES:
                res["sampler"][key][name].append(rows.get(name))

    rl_variants = {}  # size -> {result key: (rollout.mode, extra overrides)}: the runs of ours in each round
    rl_sizes = args.rl_sizes if "rl" in args.parts else []
    for name in rl_sizes:
        rl_variants[name] = {"ours": ("sync", ())}
        if args.one_step_off:
            rl_variants[name]["one_step_off"] = ("one_step_off", ())
        if name in args.rl_weights_split_sizes and args.rl_weights_split > 1:
            rl_variants[name]["weights_split"] = ("sync", (f"hardware.rollout_mesh.model={args.rl_weights_split}",))
        for key in (*rl_variants[name], "trl"):
            res["rl"][key][name] = []
    for r in range(args.rl_rounds):
        for k, name in enumerate(rl_sizes):
            for side in (["ours", "trl"] if (k + r) % 2 else ["trl", "ours"]):  # alternate which side goes first
                if side == "trl":
                    res["rl"]["trl"][name].append(trl_rl(runner, args, name, folders[name], problems, out, r))
                    continue
                for key, (mode, extra) in rl_variants[name].items():
                    res["rl"][key][name].append(ours_rl(
                        runner, args, name, folders[name], out / f"ours-rl-{RUN_LABELS[key]}-{name}-r{r}",
                        args.ours_steps, (args.prompts_per_step, args.generations), args.rl_new_tokens, mode, extra,
                    ))

    if "weight-sync" in args.parts:
        for row in runner.run("weight-sync", [sys.executable, str(BENCH / "peers_weight_sync.py"), "--scratch",
                                              str(out / "weight-sync"), *(folders[n] for n in args.weight_sync_sizes)],
                              ours_env()):
            res["weight_sync"][Path(row["folder"]).name] = row

    if "inflight" in args.parts:
        modes = ("sync", *(m for m in OVERLAPPED_MODES if m != "one_step_off" or args.one_step_off))
        for mode in modes:
            res["inflight"][mode] = []
        for r in range(args.rl_rounds):
            for mode in (modes if r % 2 == 0 else modes[::-1]):  # alternate which mode goes first
                res["inflight"][mode].append(ours_rl(
                    runner, args, args.inflight_size, folders[args.inflight_size],
                    out / f"ours-{mode}-{args.inflight_size}-r{r}", args.inflight_steps,
                    (args.inflight_prompts_per_step, args.inflight_generations), args.inflight_new_tokens, mode,
                ))

    text = table(res, args)
    if runner.failures:
        text += "\n\nFailed:\n" + "\n".join(f"- {f}" for f in runner.failures)
    print(text)
    (out.parent / f"peers-{stamp}.md").write_text(text + "\n")
    (out.parent / f"peers-{stamp}.json").write_text(json.dumps({**res, "failures": runner.failures}, indent=1))
    print(f"\n[bench-peers] table: {out.parent / f'peers-{stamp}.md'}; logs and runs: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
