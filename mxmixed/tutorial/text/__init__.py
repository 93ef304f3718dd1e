"""An offline text corpus and a small LSTM language model, for the loss-scaling experiment.

* :mod:`.corpus`: :func:`stdlib_docstrings` / :func:`stdlib_corpus`, the docstrings of Python's
  standard library, tokenized (characters or words) and numericalized;
* :mod:`.vocab`: :class:`Vocabulary`;
* :mod:`.batches`: :func:`batchify` and :class:`BPTTBatches`, ``(T, N)`` windows of token ids,
  with targets shifted by one, for truncated back-propagation through time;
* :mod:`.model`: :class:`LSTMLanguageModel` / :func:`lstm_lm` and
  :class:`TokenCrossEntropyLoss`;
* :mod:`.experiment`: :func:`train_language_model`, one training loop for float32, AMP without
  loss scaling and AMP with dynamic loss scaling: a language-model variant of the loss-scaling
  experiment (the tutorials use the dense-prediction one, :mod:`mxmixed.tutorial.dense`, where
  float16 gradients underflow at this size; this LM did not).
"""
from .batches import BPTTBatches, batchify
from .corpus import (STDLIB_MODULES, TextCorpus, corpus_fingerprint, stdlib_corpus,
                     stdlib_docstrings, tokenize)
from .experiment import LM_MODES, float16_activation_gradients, train_language_model
from .model import LSTMLanguageModel, TokenCrossEntropyLoss, lstm_lm
from .vocab import Vocabulary

__all__ = ["STDLIB_MODULES", "stdlib_docstrings", "corpus_fingerprint", "tokenize", "Vocabulary",
           "TextCorpus", "stdlib_corpus", "batchify", "BPTTBatches", "TokenCrossEntropyLoss",
           "LSTMLanguageModel", "lstm_lm", "LM_MODES", "float16_activation_gradients",
           "train_language_model"]
