"""The pipe protocol between a rollout worker and its vLLM engine process (stdlib only: both interpreters import it).

Messages are pickled dicts, each framed by an 8-byte little-endian length. The pipe is the child's stdin/stdout,
private to the two processes (no socket is opened), so unpickling is no wider a trust boundary than the child itself.

Worker -> engine: {"op": "start" | "generate" | "load_weights" | "shutdown", ...}; while generating, the engine
sends {"event": "chunk", ...} every `decode_chunk` engine steps and waits for {"op": "continue", ...}: that reply
is where stop-string hits are aborted and queued weights are loaded, so weights only change between engine steps.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO

_HEADER = struct.Struct("<Q")


class EngineProcessError(RuntimeError):
    """The vLLM engine process failed, exited, or answered out of protocol."""


def send(stream: BinaryIO, message: dict[str, Any]) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EngineProcessError("the vLLM engine pipe closed mid-message (the process exited)")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream: BinaryIO) -> dict[str, Any]:
    (n,) = _HEADER.unpack(_read_exact(stream, _HEADER.size))
    return pickle.loads(_read_exact(stream, n))
