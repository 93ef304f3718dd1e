"""bfloat16 AMP on a gluonnlp BERT: the fused attention GEMMs (``_contrib_interleaved_matmul_*``),
whose CPU kernels are float32 only, stay float32 under ``mxmixed.init(target_dtype='bfloat16')``,
so a tiny random-init BERT classifier fine-tunes, hybridized or not. Each run is a fresh
process: AMP cannot be undone in-process."""
import json
import os
import sys
import textwrap

import pytest

from conftest import run_command
from mxmixed._core.convert import NO_BFLOAT16_CPU_OPS
from mxmixed._core.devices import bfloat16_support
from mxmixed.training._amp import _fp32_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS, WHY = bfloat16_support()

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluonnlp as nlp
    from gluonnlp.model import BERTClassifier, BERTEncoder, BERTModel
    import mxmixed

    mxmixed.init(target_dtype="bfloat16")
    words = ["good", "bad", "fine", "awful", "the", "a", "movie", "was", "is", "film"]
    vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens(words))
    encoder = BERTEncoder(num_layers=1, units=32, hidden_size=64, max_length=16, num_heads=2,
                          dropout=0.0)
    bert = BERTModel(encoder, vocab_size=len(vocab), token_type_vocab_size=2, units=32,
                     embed_size=32, use_pooler=True, use_decoder=False, use_classifier=False)
    net = BERTClassifier(bert, dropout=0.0, num_classes=2)
    mx.random.seed(0)
    net.initialize(mx.init.Normal(0.02))
    if sys.argv[1] == "hybridized":
        net.hybridize(static_alloc=True)
    rng = np.random.RandomState(0)
    ids = mx.nd.array(rng.randint(5, len(vocab), (8, 8)))
    labels = mx.nd.array(rng.randint(0, 2, (8,)))
    segments, lengths = mx.nd.zeros((8, 8)), mx.nd.full((8,), 8)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3},
                            update_on_kvstore=False)
    mxmixed.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCELoss()
    losses = []
    for _ in range(10):
        with autograd.record():
            out = net(ids, segments, lengths)
            loss = loss_fn(out, labels).mean()
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        mxmixed.step(trainer, 1)
        losses.append(float(loss.asscalar()))
    print(json.dumps({"losses": losses, "out_dtype": str(np.dtype(out.dtype).names)}))
""")


@pytest.mark.slow
@pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
@pytest.mark.parametrize("mode", ["hybridized", "imperative"])
def test_bfloat16_amp_fine_tunes_a_gluonnlp_bert_classifier(tmp_path, mode):
    pytest.importorskip("gluonnlp")
    script = tmp_path / "bert_bf16.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT, MXNET_HOME=str(tmp_path / "mxnet_home"))
    proc = run_command([sys.executable, str(script), mode], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["out_dtype"] == "('bfloat16',)"  # the classifier's Dense ran in bfloat16
    losses = result["losses"]
    assert losses[-1] < losses[0] - 0.01


def test_bfloat16_float32_list_adds_the_attention_gemms_to_amps_or_the_given_one():
    from mxnet.contrib.amp.lists import symbol_bf16
    default = _fp32_ops("bfloat16", None)
    assert default[:len(symbol_bf16.FP32_FUNCS)] == list(symbol_bf16.FP32_FUNCS)
    assert set(NO_BFLOAT16_CPU_OPS) <= set(default)
    given = _fp32_ops("bfloat16", ["softmax"])
    assert given[:1 + len(NO_BFLOAT16_CPU_OPS)] == ["softmax"] + list(NO_BFLOAT16_CPU_OPS)
    assert _fp32_ops("float16", ["softmax"]) == ["softmax"]
    assert _fp32_ops("float16", None) is None
