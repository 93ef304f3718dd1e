"""The single place that holds the package version."""
__version__ = "0.1.0"
