"""tern: a Trio-based edge agent runtime shipped as one file.

Importing this package must stay cheap: `tern version` and the pyz bootstrap import
it before anything else, so it holds only the version string.
"""

__version__ = "0.1.0"
