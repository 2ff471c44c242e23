"""Throwaway gems backend plugins with real entry points, for tests.

Two ways to install one, both seen by ``importlib.metadata`` exactly as a pip install is:

* :func:`write_site` writes the plugin module and a ``<dist>.dist-info`` (``METADATA`` and
  ``entry_points.txt``) into a directory; put it on ``PYTHONPATH`` of a subprocess
  (:func:`run_python` does). Fast: no build.
* :func:`write_project` writes a setuptools project (``pyproject.toml`` with
  ``[project.entry-points."gems_core.backends"]``) and :func:`pip_install_target` builds and
  installs it with pip into a directory of its own, leaving the environment untouched.

gems selects its backend once per process, so each scenario runs in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENTRY_POINT_GROUP = "gems_core.backends"
GEMS_SELECTION_VARIABLES = ("GEMS_DEVICE", "GEMS_EMULATE", "GEMS_COMPILE_TARGET", "GEMS_LIFT_GATES")


@dataclass(frozen=True)
class FakePlugin:
    """A backend plugin to generate.

    ``name`` is the entry-point name (the ``GEMS_DEVICE`` value). ``detect`` is
    ``(device name, arch)`` when the fake hardware is present. ``hooks`` is extra module
    source (more ``@hookimpl`` functions) appended verbatim; ``import_error`` makes the module
    raise ``RuntimeError(import_error)`` when imported.
    """

    name: str
    version: str = "0.0.1"
    vendor: str = ""
    descriptor_name: str | None = None
    detect: tuple[str, str] | None = None
    detection: str = "a fake device that is never present"
    gems_core_versions: str = ""
    triton_versions: str = ""
    device_type: str = "cuda"
    dispatch_key: str = "CUDA"
    target: tuple[str, int | str, int] = ("cuda", 90, 32)
    dtypes: Mapping[str, bool] | None = None
    hooks: str = ""
    import_error: str | None = None

    @property
    def module(self) -> str:
        return f"gems_test_backend_{self.name}"

    @property
    def distribution(self) -> str:
        return f"gems-backend-{self.name}"

    def source(self) -> str:
        """The plugin module's source."""
        if self.import_error is not None:
            return f"raise RuntimeError({self.import_error!r})\n"
        detected = (
            f"DetectedDevice(name={self.detect[0]!r}, arch={self.detect[1]!r})"
            if self.detect
            else "None"
        )
        backend, arch, warp_size = self.target
        dtypes = ", ".join(f"{k}={v!r}" for k, v in (self.dtypes or {}).items())
        header = f'''\
            """Throwaway gems backend {self.name!r}, generated for a test."""
            from gems_core import (
                BackendDescriptor, DetectedDevice, Deviation, DtypeSupport, KernelConfig,
                KernelOverride, Limits, OpGate, TritonTarget, hookimpl,
            )

            DESCRIPTOR = BackendDescriptor(
                name={self.descriptor_name or self.name!r},
                vendor={self.vendor or self.name!r},
                device_type={self.device_type!r},
                dispatch_key={self.dispatch_key!r},
                target=TritonTarget(backend={backend!r}, arch={arch!r}, warp_size={warp_size}),
                limits=Limits(max_warps=32, max_threads_per_block=1024,
                              shared_memory_per_block=49152),
                dtypes=DtypeSupport({dtypes}),
                triton_versions={self.triton_versions!r},
                gems_core_versions={self.gems_core_versions!r},
                detection={self.detection!r},
            )


            @hookimpl
            def gems_descriptor():
                return DESCRIPTOR


            @hookimpl
            def gems_detect():
                return {detected}
            '''
        return textwrap.dedent(header) + "\n" + textwrap.dedent(self.hooks)


def _metadata(plugin: FakePlugin) -> str:
    return f"Metadata-Version: 2.1\nName: {plugin.distribution}\nVersion: {plugin.version}\n"


def _entry_points(plugin: FakePlugin) -> str:
    return f"[{ENTRY_POINT_GROUP}]\n{plugin.name} = {plugin.module}\n"


def write_site(root: Path, *plugins: FakePlugin) -> Path:
    """Write ``plugins`` (modules and dist-info) into ``root``, a directory for PYTHONPATH."""
    root.mkdir(parents=True, exist_ok=True)
    for plugin in plugins:
        (root / f"{plugin.module}.py").write_text(plugin.source())
        dist_name = plugin.distribution.replace("-", "_")
        dist_info = root / f"{dist_name}-{plugin.version}.dist-info"
        dist_info.mkdir(exist_ok=True)
        (dist_info / "METADATA").write_text(_metadata(plugin))
        (dist_info / "entry_points.txt").write_text(_entry_points(plugin))
        (dist_info / "top_level.txt").write_text(plugin.module + "\n")
    return root


def write_project(root: Path, plugin: FakePlugin) -> Path:
    """Write ``plugin`` as a setuptools project in ``root`` (for ``pip install``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{plugin.module}.py").write_text(plugin.source())
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{plugin.distribution}"
            version = "{plugin.version}"
            dependencies = ["gems-core"]

            [project.entry-points."{ENTRY_POINT_GROUP}"]
            {plugin.name} = "{plugin.module}"

            [tool.setuptools]
            py-modules = ["{plugin.module}"]
            """
        )
    )
    return root


def pip_install_target(project: Path, target: Path) -> Path:
    """Build ``project`` with pip and install it into ``target`` only (no deps, no network)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(project),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def run_python(
    args: Sequence[str],
    *,
    site: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` with ``site`` on PYTHONPATH and ``env`` on top of a clean gems
    environment (GEMS_DEVICE, GEMS_EMULATE, GEMS_COMPILE_TARGET unset unless ``env`` sets
    them)."""
    full_env = {k: v for k, v in os.environ.items() if k not in GEMS_SELECTION_VARIABLES}
    full_env.pop("TRITON_INTERPRET", None)
    if site is not None:
        paths = [str(site), full_env.get("PYTHONPATH", "")]
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_info(
    *extra: str, site: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m gems_core info [extra]`` in a subprocess."""
    return run_python(["-m", "gems_core", "info", *extra], site=site, env=env)


def run_code(
    code: str, *, site: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a subprocess."""
    return run_python(["-c", textwrap.dedent(code)], site=site, env=env)
