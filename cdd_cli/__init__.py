"""cdd: constrained discrete diffusion for text and molecules.

    import cdd_cli as cdd
    generator = cdd.Generator("default-molecules", [cdd.SA(tau=3.5)])
    records = generator.molecules(n=16, seed=0)      # or: cdd.molecules(n=16, ...)

The same records as `cdd molecules` / `cdd generate` write (see `cdd_cli.api`).
"""

# The public names are the API's (`cdd_cli.api.__all__`), listed once there.
from cdd_cli.api import *  # noqa: F403
from cdd_cli.api import __all__ as _api
from cdd_cli.version import __version__

__all__ = [*_api, "__version__"]
