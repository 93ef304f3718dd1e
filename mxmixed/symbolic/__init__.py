"""Symbol graphs in float16: the manual recipe, conversion with a report, validation, search.

A user with a trained Symbol checkpoint (``prefix-symbol.json`` and ``prefix-0000.params``, from
the Module API or from a Gluon ``export()``) gets a float16 model they can check:

* :func:`float16_softmax_symbol` and :func:`multi_precision_params`: the manual recipe of
  MXNet's original float16 tutorial (cast after the input, float16 body, cast back to float32
  before ``SoftmaxOutput``; Module API training with ``multi_precision=True`` and static loss
  scaling);
* :func:`convert`: ``amp.convert_model`` with float32 inputs and outputs by default, op and
  layer exclusions, optional params cast to float16, and a :class:`ConversionReport`; its
  options, as keywords or one :class:`ConvertOptions`;
* :func:`validate`: the float32 and float16 models side by side on the same inputs
  (:class:`ValidationReport`), detectors compared by matching detections;
* :func:`search_fp32_layers`: a small set of layers that must stay float32 for the outputs to
  meet a tolerance, found from instrumented float16 runs (the error each layer adds),
  bisection and group testing;
* :func:`load_checkpoint` / :func:`save_checkpoint`: checked loading, and saving that writes
  both files or neither;
* :func:`load_float16`: a converted checkpoint as a ready ``SymbolBlock``;
* :func:`load_bfloat16`: a checkpoint converted to bfloat16 as a fast CPU ``SymbolBlock``;
* :func:`compare_speed`: a bfloat16 model against float32 on this CPU, timed side by side
  (:class:`SpeedReport`);
* :func:`convert_hybrid_block`: ``amp.convert_hybrid_block`` that works on a CPU;
* :func:`export_onnx` / :func:`validate_onnx`: the float16 model as an ONNX file, with its
  float32 layers kept, validated in onnxruntime (needs the ``onnx`` extra).

On a CPU the float16 graphs run through the emulation graph pass
(:func:`mxmixed.emulation.emulate_symbol`); on a GPU they run unchanged.

.. note::
   ``Symbol.save``, ``Symbol.tojson``, ``mx.model.save_checkpoint`` and ``HybridBlock.export``
   all *remove* ``amp_cast`` nodes by default in MXNet 1.9.1 (``remove_amp_cast=True``). A
   converted graph saved that way feeds float32 data into float16 weights and no longer
   loads. This module always saves with ``remove_amp_cast=False``.
"""
from .._core.convert import ConversionError
from ._batch import batch_axes
from ._blocks import convert_hybrid_block, load_bfloat16, load_float16
from ._checkpoints import (check_params, checkpoint_paths, data_inputs, load_checkpoint,
                           save_checkpoint)
from ._conversion import ConvertedModel, convert
from ._inference import inference_graph
from ._options import ConvertOptions
from ._recipe import float16_softmax_symbol, multi_precision_optimizer, multi_precision_params
from ._report import ConversionReport
from ._onnx import OnnxModel, check_onnx, export_onnx, validate_onnx
from ._search import SearchResult, search_fp32_layers
from ._speed import SpeedReport, compare_speed
from ._validation import ValidationReport, model_batch_axes, validate

# inference_graph, batch_axes and model_batch_axes, imported above, are for the CLI's samples
# and its ONNX export, not for users
__all__ = ["ConversionError", "float16_softmax_symbol", "multi_precision_params",
           "multi_precision_optimizer", "load_checkpoint", "save_checkpoint", "check_params",
           "checkpoint_paths", "data_inputs",
           "convert", "ConvertOptions", "ConvertedModel", "ConversionReport", "validate", "ValidationReport",
           "search_fp32_layers", "SearchResult", "load_float16", "load_bfloat16",
           "convert_hybrid_block", "export_onnx", "validate_onnx", "OnnxModel", "check_onnx",
           "compare_speed", "SpeedReport"]
