"""A plugin module that cannot be imported."""

import cdd_no_such_dependency  # noqa: F401

plugin = None
