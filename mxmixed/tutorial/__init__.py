"""Tutorial support code: the offline data, small models and training loops of the notebooks.

The notebooks, ``mxmixed demo``, the examples and the tests import it; ``import mxmixed`` does
not, so a user's training loop never loads it. Typical use::

    from mxmixed.tutorial import digits_loaders, digits_cnn, evaluate, train_precision

* :mod:`.data`: scikit-learn's handwritten digits (offline) and CIFAR-10 for those who have it;
* :mod:`.master`: float32 master weights by hand, the teaching steps of notebook 02;
* :mod:`.models`: :class:`DigitsCNN`, the small CNN every notebook trains, and
  :func:`exported_digits_mlp`, the checkpoint the Symbol examples convert;
* :mod:`.fit`: Gluon training loops, one code path for float32, AMP and float16;
* :mod:`.text`: a standard-library docstring corpus and an LSTM language model (notebook 05);
* :mod:`.transformer`: a small BERT-style Transformer classifier and its task (notebook 10);
* :mod:`.demo`: ``mxmixed demo`` (not imported here: ``from mxmixed.tutorial.demo import run_demo``).
"""
from . import data, master, models, text, transformer
from .data import SeededSampler, cifar10_loaders, digits_arrays, digits_datasets, digits_loaders
from .fit import (PRECISIONS, compare_precisions, evaluate, fit, format_comparison,
                  train_epoch, train_precision)
from .models import DigitsCNN, digits_cnn, exported_digits_mlp
from .text import (BPTTBatches, LSTMLanguageModel, Vocabulary, lstm_lm, stdlib_corpus,
                   train_language_model)
from .transformer import TransformerClassifier, module_windows, transformer_classifier

__all__ = ["data", "master", "models", "text", "transformer",
           "digits_arrays", "digits_datasets", "digits_loaders", "SeededSampler",
           "cifar10_loaders",
           "DigitsCNN", "digits_cnn", "exported_digits_mlp",
           "evaluate", "train_epoch", "fit", "train_precision", "compare_precisions",
           "format_comparison", "PRECISIONS",
           "stdlib_corpus", "Vocabulary", "BPTTBatches", "LSTMLanguageModel", "lstm_lm",
           "train_language_model",
           "TransformerClassifier", "transformer_classifier", "module_windows"]
