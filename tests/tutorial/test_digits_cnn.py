"""The shared digits CNN: Tensor Core friendly sizes and reproducible initialization."""
import mxnet as mx
import numpy as np

from mxmixed.tutorial import digits_cnn, DigitsCNN


def test_digits_cnn_sizes_are_multiples_of_8():
    net = DigitsCNN()
    shapes = {name: p.shape for name, p in net.collect_params().items()}
    conv_out = [s[0] for n, s in shapes.items() if n.endswith("weight") and len(s) == 4]
    dense_hidden = [s[0] for n, s in shapes.items() if "hidden" in n and n.endswith("weight")]
    assert conv_out and all(c % 8 == 0 for c in conv_out)
    assert dense_hidden and all(h % 8 == 0 for h in dense_hidden)


def test_digits_cnn_outputs_ten_scores_per_image():
    net = digits_cnn(seed=0)
    assert net(mx.nd.zeros((5, 1, 8, 8))).shape == (5, 10)


def test_digits_cnn_upscaled_input_for_rgb_32px():
    net = digits_cnn(seed=0, in_channels=3, image_size=32)
    assert net(mx.nd.zeros((2, 3, 32, 32))).shape == (2, 10)


def test_digits_cnn_seed_makes_identical_weights():
    a, b = digits_cnn(seed=7), digits_cnn(seed=7)
    for pa, pb in zip(a.collect_params().values(), b.collect_params().values()):
        np.testing.assert_array_equal(pa.data().asnumpy(), pb.data().asnumpy())


def test_digits_cnn_has_no_random_layers():
    net = DigitsCNN()
    kinds = set()
    net.apply(lambda block: kinds.add(type(block).__name__))
    assert "Dropout" not in kinds
