"""Tensor Core shape audit and memory report, checked against findings and sums done by hand."""
import mxnet as mx
import pytest
from gluoncv.model_zoo import get_model
from mxnet.gluon import nn, rnn

from mxmixed import diagnostics
from mxmixed.tutorial import digits_cnn


@pytest.fixture(autouse=True)
def _own_name_counters():
    """Build nets with a NameManager of their own, so that Gluon's global name counters stay
    as other test modules expect them (some name 'resnetv10_conv0_weight')."""
    with mx.name.NameManager():
        yield


# ---------------------------------------------------------------- memory, by hand
def small_mlp():
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(nn.Dense(16, in_units=8), nn.BatchNorm(in_channels=16), nn.Activation("relu"),
                nn.Dense(4, in_units=16))
    return net


def small_mlp_symbol():
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=16, name="fc1")
    h = mx.sym.BatchNorm(h, fix_gamma=False, name="bn")
    h = mx.sym.Activation(h, act_type="relu", name="relu")
    return mx.sym.FullyConnected(h, num_hidden=4, name="fc2")


# Hand computation for the MLP above, batch (2, 8), SGD with momentum (1 state):
#   trainable: W1 16*8=128, b1 16, gamma 16, beta 16, W2 4*16=64, b2 4      -> 244 elements
#     of which read by BatchNorm (stay float32 under cast): gamma+beta      ->  32
#     of which read by a float16 GEMM (cast to float16 under AMP): 128+16+64+4 -> 212
#   auxiliary: running mean 16 + running var 16                              ->  32 (float32)
#   activations: dense0 2*16=32, batchnorm 32, relu 32, dense1 2*4=8          -> 104 elements
#   input batch: 2*8                                                         ->  16 elements
HAND = {
    "float32": {"parameters": 244 * 4, "gradients": 244 * 4, "optimizer states": 244 * 4,
                "master weights": 0, "auxiliary states": 32 * 4, "weight copies": 0,
                "activations": 104 * 4, "input batch": 16 * 4},
    # AMP: params, grads and state stay float32; each forward makes float16 copies of the
    # 212 GEMM parameter elements; activations are float16, plus the float16 copy of the
    # input that dense0 reads (16 elements); the cast of relu's float16 output to float16
    # copies nothing: (16 + 104) * 2 B
    "amp": {"parameters": 244 * 4, "gradients": 244 * 4, "optimizer states": 244 * 4,
            "master weights": 0, "auxiliary states": 32 * 4, "weight copies": 212 * 2,
            "activations": (16 + 104) * 2, "input batch": 16 * 4},
    # cast('float16') + multi_precision: 212 float16 + 32 float32 params (and grads), float32
    # master copies of the 212 float16 ones, float32 momentum for all 244
    "float16": {"parameters": 212 * 2 + 32 * 4, "gradients": 212 * 2 + 32 * 4,
                "optimizer states": 244 * 4, "master weights": 212 * 4,
                "auxiliary states": 32 * 4, "weight copies": 0, "activations": 104 * 2,
                "input batch": 16 * 2},
}


# mx.contrib.amp.convert_symbol (the Symbol's AMP column) also casts the graph's output back
# to float32: 2*4 elements more, at 4 B. Gluon's AMP leaves the output float16.
SYMBOL_OUTPUT_CAST = 2 * 4 * 4


@pytest.mark.parametrize("build", [small_mlp, small_mlp_symbol], ids=["gluon", "symbol"])
def test_memory_report_matches_hand_computation(build):
    report = diagnostics.memory_report(build(), (2, 8))
    extra = SYMBOL_OUTPUT_CAST if build is small_mlp_symbol else 0
    for config, items in HAND.items():
        for item, expected in items.items():
            if (config, item) == ("amp", "activations"):
                expected += extra
            assert report.bytes(config, item) == expected, (config, item)
        assert report.bytes(config) == sum(items.values()) + (extra if config == "amp" else 0)
    assert report.totals == {"float32": 3536, "amp": 3784 + extra, "float16": 3296}
    # each line shows its arithmetic
    assert report.formula("float16", "parameters") == \
        "32 x 4 B (float32) + 212 x 2 B (float16) = 552 B"
    assert report.formula("amp", "weight copies") == "212 x 2 B (float16) = 424 B"
    assert report.formula("float32", "activations") == \
        "104 x 4 B (float32) = 416 B (4 op outputs)"
    text = str(report)
    assert "master weights" in text and "%d B" % (3784 + extra) in text and "float16+MP" in text


def test_memory_report_optimizer_states_and_digits_cnn_by_hand():
    report = diagnostics.memory_report(digits_cnn(seed=0), (64, 1, 8, 8), optimizer_states=2)
    # conv0 16*1*3*3=144, bn0 16+16, conv1 32*16*3*3=4608, bn1 32+32, hidden 64*512+64=32832,
    # output 10*64+10=650: 38330 trainable, 96 in BatchNorm; aux 2*16 + 2*32 = 96
    assert report.bytes("float32", "parameters") == 38330 * 4
    assert report.bytes("float32", "optimizer states") == 2 * 38330 * 4
    assert report.bytes("float16", "master weights") == (38330 - 96) * 4
    assert report.bytes("amp", "auxiliary states") == 96 * 4
    # activations per image: conv0, bn0, relu0 16*8*8 each; conv1, bn1, relu1 32*8*8 each;
    # pool 32*4*4; hidden and its relu 64 each; output 10
    per_image = 3 * 1024 + 3 * 2048 + 512 + 2 * 64 + 10
    assert report.bytes("float32", "activations") == 64 * per_image * 4
    assert report.bytes("float16", "activations") == 64 * per_image * 2
    assert report.bytes("amp", "activations") == (64 * per_image + 64 * 64) * 2  # + input cast


def test_memory_report_errors():
    with pytest.raises(ValueError, match=r"\(2, 9\) does not fit"):
        diagnostics.memory_report(small_mlp(), (2, 9))
    with pytest.raises(TypeError, match="HybridBlock or an mxnet Symbol"):
        diagnostics.memory_report(object(), (2, 8))
    with pytest.raises(TypeError, match="plain gluon.Block"):
        diagnostics.memory_report(nn.Block(), (2, 8))
    with pytest.raises(ValueError, match="optimizer_states"):
        diagnostics.memory_report(small_mlp(), (2, 8), optimizer_states=-1)


# ---------------------------------------------------------------- Tensor Cores, by hand
def _summary(audit):
    return sorted((f.layer, f.dimension, f.value, f.suggested) for f in audit.findings)


def test_resnet50_v1_only_the_rgb_input_conv_is_misaligned():
    audit = diagnostics.tensor_core_audit(get_model("resnet50_v1", pretrained=False),
                                          (32, 3, 224, 224))
    # 53 convolutions (1 stem + 16 bottlenecks x 3 + 4 downsamples) and the classifier
    assert len(audit.layers) == 54
    assert _summary(audit) == [("net.features[0] (Conv2D)", "input channels", 3, 8)]
    dense = [l for l in audit.layers if l["op"] == "FullyConnected"]
    # 1000 classes = 125 * 8: aligned, and so are 2048 features and the batch of 32
    assert dense[0]["dims"] == {"batch": 32, "input features": 2048, "output features": 1000}
    assert "pad it with zero channels" in audit.findings[0].advice


def test_mobilenet1_0_channels_are_aligned_and_depthwise_convs_are_notes():
    audit = diagnostics.tensor_core_audit(get_model("mobilenet1.0", pretrained=False),
                                          (32, 3, 224, 224))
    assert _summary(audit) == [("net.features[0] (Conv2D)", "input channels", 3, 8)]
    # width 1.0: 32, 64, 128, 256, 512 and 1024 channels, all multiples of 8
    channels = {l["dims"]["output channels"] for l in audit.layers
                if l["op"] == "Convolution" and l["dims"]}
    assert channels == {32, 64, 128, 256, 512, 1024}
    assert len(audit.notes) == 13 and all("depthwise" in n for n in audit.notes)


def test_cifar_resnet20_v1_flags_the_input_and_the_10_class_output():
    net = get_model("cifar_resnet20_v1", pretrained=False)
    audit = diagnostics.tensor_core_audit(net, (32, 3, 32, 32))
    assert _summary(audit) == [("net.features[0] (Conv2D)", "input channels", 3, 8),
                               ("net.output (Dense)", "output features", 10, 16)]
    assert "16 outputs" in audit.find("net.output")[0].advice
    # a batch of 12 is misaligned for the Dense GEMM, not for the convolutions
    odd = diagnostics.tensor_core_audit(net, (12, 3, 32, 32))
    assert [(f.layer, f.dimension, f.value) for f in odd.find(dimension="batch")] == \
        [("net.output (Dense)", "batch", 12)]
    # the same graph as a Symbol gives the same findings, named by node
    sym_audit = diagnostics.tensor_core_audit(net(mx.sym.var("data")), (32, 3, 32, 32))
    assert [(f.node, f.dimension, f.value) for f in sym_audit.findings] == \
        [(f.node, f.dimension, f.value) for f in audit.findings]
    assert sym_audit.findings[0].layer == sym_audit.findings[0].node
    assert "2 dimension(s) not a multiple of 8" in str(audit)


def test_rnn_and_embedding_dimensions():
    class LM(nn.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.embed = nn.Embedding(1000, 100)
                self.lstm = rnn.LSTM(250, input_size=100)
                self.out = nn.Dense(1003, flatten=False, in_units=250)

        def hybrid_forward(self, F, x):
            return self.out(self.lstm(self.embed(x)))

    audit = diagnostics.tensor_core_audit(LM(), (35, 20))  # (time, batch) token ids
    assert _summary(audit) == sorted([
        ("net.embed (Embedding)", "embedding size", 100, 104),
        ("net.lstm (LSTM)", "batch", 20, 24),
        ("net.lstm (LSTM)", "input size", 100, 104),
        ("net.lstm (LSTM)", "hidden size", 250, 256),
        ("net.out (Dense)", "rows", 35 * 20, 704),
        ("net.out (Dense)", "input features", 250, 256),
        ("net.out (Dense)", "output features", 1003, 1008)])
    report = diagnostics.memory_report(LM(), (35, 20))
    assert report.bytes("float16", "activations") * 2 == report.bytes("float32", "activations")


def test_tensor_core_audit_errors():
    with pytest.raises(ValueError, match=r"\(32, 3, 8, 8\) does not fit.*conv0"):
        diagnostics.tensor_core_audit(digits_cnn(), (32, 3, 8, 8))  # a 1-channel net
    with pytest.raises(ValueError, match=r"\(32, 3, 224\) does not fit"):
        diagnostics.tensor_core_audit(get_model("resnet50_v1", pretrained=False), (32, 3, 224))
    with pytest.raises(TypeError, match="plain gluon.Block"):
        diagnostics.tensor_core_audit(nn.Block(), (1, 8))
    with pytest.raises(ValueError, match="names.*'images'"):
        diagnostics.tensor_core_audit(small_mlp(), {"images": (2, 8)})
    with pytest.raises(ValueError, match="multiple"):
        diagnostics.tensor_core_audit(small_mlp(), (2, 8), multiple=1)


def test_memory_report_frozen_layer_has_no_gradient_state_or_master_copy():
    net = small_mlp()
    net[0].collect_params().setattr("grad_req", "null")
    report = diagnostics.memory_report(net, (2, 8))
    # dense0's W1 (128) and b1 (16) are frozen: still stored, but 244 - 144 = 100 train
    assert report.bytes("float32", "parameters") == 244 * 4
    assert report.bytes("float32", "gradients") == 100 * 4
    assert report.bytes("amp", "optimizer states") == 100 * 4
    assert report.bytes("float16", "master weights") == (212 - 144) * 4
    assert report.bytes("float16", "gradients") == 68 * 2 + 32 * 4
