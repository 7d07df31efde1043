"""as2d's command line (typer + rich). The engine lives in ``runtime``, models in ``models``."""

__version__ = "0.1.0"
