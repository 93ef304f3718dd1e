"""The offline digits data: deterministic splits, shapes and a resumable sampler."""
import numpy as np
import pytest

from mxmixed.tutorial import data


def test_digits_split_is_deterministic_and_disjoint():
    a = data.digits_arrays(seed=3)
    b = data.digits_arrays(seed=3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    X_train, y_train, X_test, y_test = a
    assert len(X_train) + len(X_test) == 1797
    assert len(X_test) == round(1797 * 0.2)
    train_rows = {row.tobytes() for row in X_train.reshape(len(X_train), -1)}
    overlap = sum(row.tobytes() in train_rows for row in X_test.reshape(len(X_test), -1))
    assert overlap < 5  # the digits set itself holds a handful of duplicate images


def test_digits_other_seed_gives_another_split():
    assert not np.array_equal(data.digits_arrays(seed=0)[1], data.digits_arrays(seed=1)[1])


def test_digits_are_nchw_float32_in_unit_range():
    X_train, y_train, _, _ = data.digits_arrays()
    assert X_train.dtype == np.float32 and X_train.shape[1:] == (1, 8, 8)
    assert 0.0 <= X_train.min() and X_train.max() <= 1.0
    assert set(np.unique(y_train)) == set(range(10))


def test_digits_upscale_to_cifar_shape():
    X_train, _, _, _ = data.digits_arrays(size=32, channels=3)
    small = data.digits_arrays()[0]
    assert X_train.shape[1:] == (3, 32, 32)
    np.testing.assert_array_equal(X_train[:, 2, ::4, ::4], small[:, 0])


@pytest.mark.parametrize("kwargs", [{"size": 12}, {"test_fraction": 1.0}, {"channels": 0}])
def test_digits_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        data.digits_arrays(**kwargs)


def test_loader_order_replays_from_saved_sampler_state():
    train_loader, _ = data.digits_loaders(batch_size=32, seed=5)
    state = train_loader.seeded_sampler.get_state()
    first = [y.asnumpy() for _, y in train_loader]
    train_loader.seeded_sampler.set_state(state)
    again = [y.asnumpy() for _, y in train_loader]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    third = [y.asnumpy() for _, y in train_loader]
    assert not all(np.array_equal(a, b) for a, b in zip(first, third))
    assert all(len(y) == 32 for y in first)


def test_cifar10_without_data_refuses_to_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=False"):
        data.cifar10_loaders(root=str(tmp_path))
