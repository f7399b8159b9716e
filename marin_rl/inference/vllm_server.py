"""The vLLM engine process behind `hardware.inference_backend=vllm` (runs in .venv-vllm: vllm, torch, numpy only).

    .venv-vllm/bin/python -m marin_rl.inference.vllm_server     (started by marin_rl.inference.vllm_sampler)

It owns one in-process `vllm.LLMEngine` (VLLM_ENABLE_V1_MULTIPROCESSING=0, synchronous scheduling) and drives it
one `engine.step()` at a time, so that the worker decides what happens between steps: stop-string aborts, weight
loads (in place, through the model's own `load_weights` with HF tensor names) and, for kv_on_swap=recompute, the
re-prefill of the sequences in flight under the new weights. Prompts arrive as token ids (the engine has no
tokenizer: `skip_tokenizer_init`); every sampled token comes back with vLLM's processed log-prob (after temperature,
top-k and top-p), which without truncation is log softmax(logits / T)[token], the trainer's quantity.
Protocol: marin_rl/inference/vllm_protocol.py. Stdout carries only protocol frames; vLLM's logs go to stderr.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from marin_rl.inference import vllm_protocol as proto

# Before vllm is imported: keep the engine core in this process (its model is then reachable for load_weights
# between steps, with no RPC to a grandchild process).
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


class Generation:
    """The requests of one `generate` call: rows of (row id, prompt tokens, seed), their outputs, re-submissions."""

    def __init__(self, engine, msg: dict[str, Any]):
        self.engine = engine
        self.msg = msg
        self.prompts = {row: list(tokens) for row, tokens, _ in msg["rows"]}
        self.seeds = {row: int(seed) for row, _, seed in msg["rows"]}
        self.generated: dict[int, list[int]] = {row: [] for row in self.prompts}
        self.running: dict[str, int] = {}  # vLLM request id -> row
        self.submissions = 0
        for row in self.prompts:
            self._submit(row)

    def _params(self, row: int, max_tokens: int):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        m = self.msg
        greedy = m["greedy"] or m["temperature"] <= 0.0
        return SamplingParams(
            n=1,
            temperature=0.0 if greedy else m["temperature"],
            top_k=0 if greedy else m["top_k"],
            top_p=1.0 if greedy else m["top_p"],
            max_tokens=max_tokens,
            stop_token_ids=m["eos_ids"],
            ignore_eos=not m["eos_ids"],  # no EOS id: run to max_tokens (the engine has no tokenizer to ask)
            logprobs=0,  # the sampled token's log-prob only
            detokenize=False,
            skip_special_tokens=False,
            # a re-submitted row (kv_on_swap=recompute) moves on to another seed: it must not replay its draws
            seed=(self.seeds[row] + self.submissions) % (2**63),
            output_kind=RequestOutputKind.DELTA,
        )

    def _submit(self, row: int) -> None:
        left = self.msg["max_new"] - len(self.generated[row])
        request_id = f"r{row}.{self.submissions}"
        prompt = {"prompt_token_ids": self.prompts[row] + self.generated[row]}
        self.engine.add_request(request_id, prompt, self._params(row, left))
        self.running[request_id] = row
        self.submissions += 1

    def step(self, delta: dict[int, list]) -> None:
        """One engine step; new tokens and log-probs (and the finish reason of finished rows) go into `delta`."""
        for out in self.engine.step():
            row = self.running.get(out.request_id)
            if row is None:  # an aborted request's last output
                continue
            comp = out.outputs[0]
            tokens = list(comp.token_ids)
            logprobs = [float(lp[t].logprob) for t, lp in zip(tokens, comp.logprobs or [])]
            if len(logprobs) != len(tokens):
                raise proto.EngineProcessError(
                    f"vLLM returned {len(tokens)} tokens but {len(logprobs)} log-probs for row {row}"
                )
            self.generated[row].extend(tokens)
            entry = delta.setdefault(row, [[], [], None])
            entry[0].extend(tokens)
            entry[1].extend(logprobs)
            if out.finished:
                del self.running[out.request_id]
                entry[2] = "length" if comp.finish_reason == "length" else "stop"

    def abort(self, rows: set[int]) -> None:
        ids = [rid for rid, row in self.running.items() if row in rows]
        if ids:
            self.engine.abort_request(ids)
        for rid in ids:
            del self.running[rid]

    def resubmit_running(self) -> None:
        """Re-prefill every unfinished row under the current weights: prompt + its tokens so far as the new prompt."""
        rows = list(self.running.values())
        self.abort(set(rows))
        for row in rows:
            self._submit(row)


def load_weights(engine, names: list[str], arrays: list, version: int) -> float:
    """Copy HF-named arrays into the engine's model in place, through vLLM's in-place reload (it re-runs the
    kernel-format processing, e.g. the CPU backend's weight repacking; vLLM's loader fuses q/k/v and gate/up)."""
    import torch

    t0 = time.perf_counter()
    # unpickled arrays are read-only views of the message bytes; torch wants writable memory
    weights = [(name, torch.from_numpy(a.copy())) for name, a in zip(names, arrays)]

    def reload(worker) -> None:
        from vllm.model_executor.model_loader.reload.inplace import reload_weights

        with torch.no_grad():
            reload_weights(worker.vllm_config, worker.get_model(), iter(weights), None, True)

    engine.collective_rpc(reload)
    engine.set_weight_version(str(version))
    return time.perf_counter() - t0


def start_engine(msg: dict[str, Any]):
    from vllm import EngineArgs, LLMEngine

    args = EngineArgs(
        model=msg["model_dir"],
        skip_tokenizer_init=True,
        dtype=msg["dtype"],
        max_model_len=msg["max_model_len"],
        max_num_seqs=msg["max_num_seqs"],
        gpu_memory_utilization=msg["memory_fraction"],
        enforce_eager=True,
        enable_prefix_caching=False,  # cached blocks would outlive a weight swap
        # whole prefills: a partial one discards its sampled token by rewinding the request's seeded generator,
        # which torch's CPU generator cannot do ("CPU Generator does not use offset")
        enable_chunked_prefill=False,
        async_scheduling=False,  # a step's outputs are that step's tokens: versions are exact
        logprobs_mode="processed_logprobs",  # after temperature (and top-k/top-p): the trainer's convention
        seed=msg["seed"],
    )
    return LLMEngine.from_engine_args(args)


def serve(inp, out) -> None:
    engine = None
    while True:
        msg = proto.receive(inp)
        op = msg["op"]
        if op == "shutdown":
            proto.send(out, {"ok": True})
            return
        if op == "start":
            t0 = time.perf_counter()
            engine = start_engine(msg)
            import torch
            import vllm

            proto.send(out, {"ok": True, "seconds": time.perf_counter() - t0, "vllm": str(vllm.__version__),
                             "torch": str(torch.__version__)})
        elif op == "load_weights":
            seconds = load_weights(engine, msg["names"], msg["arrays"], msg["version"])
            proto.send(out, {"ok": True, "seconds": seconds})
        elif op == "generate":
            generate(engine, msg, inp, out)
        else:
            raise proto.EngineProcessError(f"unknown op {op!r}")


def generate(engine, msg: dict[str, Any], inp, out) -> None:
    """Step the engine; every decode_chunk steps report the new tokens and apply the worker's reply."""
    gen = Generation(engine, msg)
    steps, load_seconds = 0, 0.0
    while gen.running:
        delta: dict[int, list] = {}
        for _ in range(msg["decode_chunk"]):
            gen.step(delta)
            steps += 1
            if not gen.running:
                break
        done = not gen.running
        proto.send(out, {"event": "chunk", "delta": delta, "done": done, "steps": steps, "load_seconds": load_seconds})
        if done:
            return
        reply = proto.receive(inp)
        gen.abort(set(reply.get("stop_rows", ())))
        weights = reply.get("weights")
        load_seconds = 0.0
        if weights is not None:
            load_seconds = load_weights(engine, *weights)
            if msg["kv_on_swap"] == "recompute" and gen.running:
                gen.resubmit_running()
        if not gen.running:  # every row stopped by the reply
            proto.send(out, {"event": "chunk", "delta": {}, "done": True, "steps": steps,
                             "load_seconds": load_seconds})
            return


def main() -> None:
    # Protocol frames own the real stdout; anything vLLM or torch prints goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    inp = sys.stdin.buffer
    try:
        serve(inp, out)
    except proto.EngineProcessError as err:  # the worker closed the pipe (it exited or was killed): so do we
        print(f"vllm_server: exiting: {err}", file=sys.stderr, flush=True)
    except BaseException as err:  # tell the worker what failed before exiting
        try:
            proto.send(out, {"ok": False, "error": f"{type(err).__name__}: {err}"})
        finally:
            raise


if __name__ == "__main__":
    main()
