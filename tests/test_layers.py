"""The package's layers: ``import mxmixed`` stays light, and imports point only down."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_python


def test_import_mxmixed_loads_nothing_of_the_tutorial():
    proc = run_python("import mxmixed, sys\n"
                      "loaded = sorted(m for m in sys.modules if m.startswith('mxmixed.tutorial'))\n"
                      "print('LOADED=%s' % loaded)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LOADED=[]" in proc.stdout


def test_tutorial_names_left_the_top_level_namespace():
    import mxmixed

    for name in ("digits_loaders", "digits_datasets", "DigitsCNN", "digits_cnn", "lstm_lm",
                 "stdlib_corpus", "BPTTBatches", "Vocabulary", "LSTMLanguageModel", "text",
                 "fit", "data", "models"):
        assert name not in mxmixed.__all__
    from mxmixed.tutorial import (DigitsCNN, compare_precisions, digits_arrays,  # noqa: F401
                                  digits_cnn, digits_loaders, evaluate, fit, format_comparison,
                                  text, train_precision)

    assert callable(fit) and hasattr(text, "train_language_model")
