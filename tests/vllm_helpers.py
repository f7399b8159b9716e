"""The vLLM environment the vLLM tests need (`make vllm`; `make test` builds it): skip without it, fail under CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from marin_rl.config.spec import VllmConfig
from marin_rl.inference.vllm_env import vllm_python

VLLM_PY = vllm_python(VllmConfig())

needs_vllm = pytest.mark.skipif(
    not Path(VLLM_PY).exists() and os.environ.get("CI") != "true",
    reason=f"no vLLM environment at {VLLM_PY}: `make vllm` builds it (`make test` does)",
)
