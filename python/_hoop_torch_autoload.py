"""Lets a script use backend="hoop" without `import hoop_torch`.

pip installs hoop_torch-autoload.pth beside the packages, and Python runs
its one line, which imports this module, when it starts. This module
imports nothing heavy: it waits for `torch` to be imported and then
imports hoop_torch, which registers the backend, so that changing
backend="gloo" to backend="hoop" is the whole change, on every PyTorch
(2.5 added the same for device extensions, not for these). A failure to
import hoop_torch then is a warning, never a failed `import torch`.
HOOP_TORCH_AUTOLOAD=0 turns it off.
"""
import os
import sys


class _AfterTorch:
    """An import finder that finds nothing itself: asked for `torch`, it
    lets the other finders find it and wraps the loader they chose."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenHoop(spec.loader)
        return spec


class _ThenHoop:
    """torch's own loader, and hoop_torch's import once it has run."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        # From here on torch sees its own loader, as if nothing came between.
        module.__loader__ = module.__spec__.loader = self._loader
        try:
            import hoop_torch  # noqa: F401  (registers the backend)
        except Exception as e:  # noqa: BLE001  (any failure: torch works on)
            import warnings
            warnings.warn(f"backend 'hoop' is unavailable: importing "
                          f"hoop_torch failed: {e!r} (HOOP_TORCH_AUTOLOAD=0 "
                          f"stops this attempt)", RuntimeWarning)


def _install():
    if os.environ.get("HOOP_TORCH_AUTOLOAD", "1") == "0":
        return
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _AfterTorch())


_install()
