#!/usr/bin/env python3
"""Builds and installs hoop_torch, the torch.distributed backend "hoop":

    pip install --no-build-isolation ./python

--no-build-isolation builds against the torch this Python already
imports; an isolated build would download another. CMake builds libhoop
and the extension from this repository (the folder above this one) in a
scratch folder, or brings the build tree named by HOOP_BUILD_DIR up to
date instead. It needs what building hoop needs, PyTorch's C++ headers,
pybind11 and Python's headers (Debian: libtorch-dev, pybind11-dev,
python3-dev).
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Installed at the top of site-packages, where Python runs it at start-up;
# see _hoop_torch_autoload.py.
AUTOLOAD = "hoop_torch-autoload.pth"


class CMakeBuild(build_ext):
    """The module comes from CMake (python/CMakeLists.txt), not from
    setuptools' compiler: one build definition for both ways in."""

    def build_extension(self, ext):
        build = Path(os.environ.get("HOOP_BUILD_DIR") or
                     Path(self.build_temp) / "cmake").resolve()
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build),
                            "-DHOOP_BUILD_TESTS=OFF", "-DHOOP_BUILD_BENCH=OFF",
                            "-DHOOP_ENABLE_TORCH=ON",
                            f"-DHOOP_PYTHON3={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target",
                        "hoop_torch_ext", "--parallel",
                        str(os.cpu_count() or 1)], check=True)
        module = "_C" + sysconfig.get_config_var("EXT_SUFFIX")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "python" / "hoop_torch" / module, target)


class BuildPy(build_py):
    """The modules, and the .pth file beside them."""

    def run(self):
        super().run()
        self.copy_file(str(HERE / AUTOLOAD),
                       str(Path(self.build_lib) / AUTOLOAD))


def version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(hoop VERSION ([0-9.]+)", text).group(1)


setup(name="hoop_torch",
      version=version(),
      description="hoop as a torch.distributed backend",
      packages=["hoop_torch"],
      py_modules=["_hoop_torch_autoload"],
      ext_modules=[Extension("hoop_torch._C", sources=[])],
      cmdclass={"build_ext": CMakeBuild, "build_py": BuildPy},
      python_requires=">=3.8")
