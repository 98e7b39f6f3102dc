"""The package's PEP 517 backend: maturin's, making a wheel that installs on any
Linux of glibc 2.28 or newer (manylinux_2_28), whatever glibc builds it.

maturin's own backend does neither half of that from pyproject.toml: it tags
a wheel that pip or `python -m build` makes for the building machine alone
(linux_<arch>), and it links against the building machine's glibc, whose
symbol versions (2.34's pthread_create, say) an older host does not have.
So here the extension is linked by zig (the ziglang package) against glibc
2.28's symbols, and the wheel is tagged for that. Only the final link goes
through zig: every library it links is built by cargo as the workspace builds
it, so a build in the checkout reuses the workspace's artifacts, where
`maturin build --zig` (an explicit target) would build every dependency again.

Elsewhere (macOS, a libc other than glibc) this is maturin's backend as is.
The caller's own build arguments (config setting `maturin.build-args`, or
MATURIN_PEP517_ARGS) are kept, and a compatibility or `--zig` in them wins.
"""

import os
import platform
import shutil
import sys
import tempfile

import maturin
from maturin import (  # noqa: F401 (the hooks served unchanged)
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_wheel,
)

GLIBC = "2.28"
TAG = "manylinux_" + GLIBC.replace(".", "_")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return maturin.build_wheel(wheel_directory, _settings(config_settings), metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return maturin.build_editable(wheel_directory, _settings(config_settings), metadata_directory)


def _settings(config_settings):
    settings = dict(config_settings or {})
    if not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"):
        return settings
    args = list(maturin.get_maturin_pep517_args(settings))
    if not any(a.split("=")[0] in ("--compatibility", "--manylinux") for a in args):
        args = ["--compatibility", TAG, *args]
    if "--zig" not in args:
        args += [] if "--" in args else ["--"]
        args += ["-C", "linker=" + _zig_linker()]
    settings.pop("build-args", None)
    settings["maturin.build-args"] = args
    return settings


def _zig_linker():
    """An executable that links as a C compiler would, through `maturin zig cc`
    (which adapts rustc's linker arguments to zig), for glibc 2.28.

    It names nothing of this build (maturin is on PATH in any environment that
    builds with it; zig comes from the environment below), so it is the same
    file from one build to the next and an unchanged extension is not linked
    again."""
    if shutil.which("maturin") is None:
        raise RuntimeError("maturin is not on PATH: it is a build requirement (pyproject.toml)")
    # zig from the ziglang package of the interpreter that runs this build,
    # for the linker maturin's cargo runs.
    os.environ["CARGO_ZIGBUILD_ZIG_COMMAND"] = sys.executable
    os.environ["CARGO_ZIGBUILD_ZIG_COMMAND_ARGS"] = "-m ziglang"
    target = f"{platform.machine()}-linux-gnu.{GLIBC}"
    script = f'#!/bin/sh\nexec maturin zig cc -- -g -fno-sanitize=all -target {target} "$@"\n'
    path = os.path.join(_cache_dir(), f"zig-cc-{target}")
    if not (os.access(path, os.X_OK) and _read(path) == script):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".zig-cc-")
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return path


def _cache_dir():
    """The building user's own (pip's cache is beside it), else a new one."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "shoal-build")
    try:
        os.makedirs(path, exist_ok=True)
        return path
    except OSError:
        return tempfile.mkdtemp(prefix="shoal-build-")


def _read(path):
    with open(path) as f:
        return f.read()
