"""clustercheck: pytest-style acceptance tests for GPU clusters."""

from clustercheck.errors import UserError

__version__ = "0.1.0"
__all__ = ["UserError", "__version__"]
