"""What `triptych bench` runs on: the CPU and the devices. (Its threads are
set by `triptych.common.threads.thread_limits`, which `triptych train` shares.)

Devices: `resolve_device` turns --device (cpu, cuda, auto) into the device of
the run, and says which installed framework cannot reach it.
"""

from __future__ import annotations

import contextlib
import platform

from triptych.common.backends import BackendMissingError, load_backend
from triptych.common.errors import CommandError


def cuda_visibility() -> dict[str, str | None]:
    """For torch and JAX, where installed: the CUDA device each sees, or None."""
    found: dict[str, str | None] = {}
    if _installed("torch"):
        import torch

        found["torch"] = (
            torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        )
    if _installed("jax"):
        import jax

        try:
            found["jax"] = str(jax.devices("gpu")[0].device_kind)
        except RuntimeError:
            found["jax"] = None
    return found


def _installed(framework: str) -> bool:
    try:
        load_backend(framework)
    except BackendMissingError:
        return False
    return True


def resolve_device(asked: str) -> tuple[str, dict[str, str]]:
    """The device to run on, and why some frameworks cannot reach it.

    Returns:
        ("cpu" or "cuda", {framework: reason}) for torch and JAX where they are
        installed but see no CUDA device on a CUDA run (NumPy runs on the CPU
        whatever the device: it is the baseline).

    Raises:
        CommandError: --device cuda on a machine where no installed
            framework sees a CUDA device.
    """
    if asked == "cpu":
        return "cpu", {}
    seen = cuda_visibility()
    if not any(seen.values()):
        if asked == "auto":
            return "cpu", {}
        parts = [f"{name} sees none" for name in ("torch", "jax") if name in seen] + [
            f"{name} is not installed" for name in ("torch", "jax") if name not in seen
        ]
        raise CommandError(
            f"--device cuda was asked for, but no CUDA device exists here: "
            f"{', '.join(parts)}; the devices there are: cpu"
        )
    unreachable = {
        name: f"{name} sees no CUDA device (its devices: cpu)"
        for name, device in seen.items()
        if device is None
    }
    return "cuda", unreachable


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"
