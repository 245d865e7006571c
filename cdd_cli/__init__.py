"""cdd: constrained discrete diffusion for text and molecules.

    import cdd_cli as cdd
    generator = cdd.Generator("default-molecules", [cdd.SA(tau=3.5)])
    records = generator.molecules(n=16, seed=0)      # or: cdd.molecules(n=16, ...)

The same records as `cdd molecules` / `cdd generate` write (see `cdd_cli.api`).
"""

from __future__ import annotations

import importlib
from importlib.util import find_spec
from typing import Any

from cdd_cli.version import __version__ as __version__

# The public names are the API's (`cdd_cli.api.__all__`), listed once there. They are looked
# up on first use (PEP 562) rather than imported here: the API imports torch (seconds), and
# the `cdd` command must install its Ctrl-C and SIGTERM handlers before that
# (`cdd_cli/__main__.py`), which importing this package must not delay.
API = "cdd_cli.api"


def __getattr__(name: str) -> Any:
    dunder = name.startswith("__") and name != "__all__"
    if dunder or ("." not in name and find_spec(f"cdd_cli.{name}") is not None):
        # A submodule not imported yet (`from cdd_cli import plugins`): the import system
        # asks here first, then imports it; the API is not needed for that.
        raise AttributeError(f"module 'cdd_cli' has no attribute {name!r}")
    # By name, not an import statement: this is the one deferred import of the package, and
    # the import-order checks (tests/projection/test_engine.py) read statements only.
    api = importlib.import_module(API)
    public = getattr(api, "__all__", ())  # empty while the API itself is being imported
    if name == "__all__":
        return [*public, "__version__"]
    if name not in public:
        raise AttributeError(f"module 'cdd_cli' has no attribute {name!r}")
    value = getattr(api, name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
