"""The core every layer stands on: graphs, conversion, state, patches, dtypes and settings.
Private to mxmixed; it imports MXNet and NumPy only."""
