"""What `triptych bench` runs on: the CPU and the devices. (Its threads are
set by `triptych.common.threads.thread_limits`, which `triptych train` shares.)

Devices: `resolve_device` turns --device (cpu, cuda, auto) into the device of
the run, and says which installed framework cannot reach it.
"""

from __future__ import annotations

import contextlib
import platform

from shared import registry
from triptych.common.backends import BackendMissingError, hooks, load_backend
from triptych.common.errors import CommandError


def cuda_visibility() -> dict[str, str | None]:
    """For each installed framework that can compute on a CUDA GPU (torch,
    JAX): the CUDA device it sees, or None."""
    found: dict[str, str | None] = {}
    for name in _gpu_frameworks():
        try:
            load_backend(name)
        except BackendMissingError:
            continue
        found[name] = hooks(name).cuda_device()
    return found


def _gpu_frameworks() -> list[str]:
    """The registry's frameworks that can compute on a CUDA GPU."""
    return [f.name for f in registry.frameworks() if "cuda" in f.devices]


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
        gpu = _gpu_frameworks()
        parts = [f"{name} sees none" for name in gpu if name in seen] + [
            f"{name} is not installed" for name in gpu if name not in seen
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
