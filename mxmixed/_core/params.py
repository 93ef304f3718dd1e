"""The one home of how MXNet names parameters: the suffixes that tell a parameter from data.

Gluon names a layer's parameters ``<layer>_weight``, ``_bias``, ``_gamma``, ``_beta``,
``_running_mean`` and ``_running_var``; the Module API's BatchNorm names its statistics
``_moving_mean`` and ``_moving_var``. A graph input whose name ends otherwise is taken for data
where nothing better says which it is (no params dict at hand).
"""

__all__ = ["PARAM_SUFFIXES", "is_param_name"]

PARAM_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var",
                  "_running_mean", "_running_var")
"""tuple of str: the endings of the names MXNet gives parameters and auxiliary states."""


def is_param_name(name):
    """Whether ``name`` is named as MXNet names a parameter or auxiliary state.

    Parameters
    ----------
    name : str

    Returns
    -------
    bool
    """
    return name.endswith(PARAM_SUFFIXES)
