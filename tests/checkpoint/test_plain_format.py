"""A checkpoint keeps what it is given without pickle (``checkpoint/_plain``, ``_trainer``):
``extra`` with its types, every optimizer's state bit for bit, a learning-rate schedule onto one
of the same class."""
import mxnet as mx
import numpy as np
import pytest

from conftest import dense_and_trainer, dense_step
from mxmixed import checkpoint
from mxmixed.checkpoint import CheckpointError


def test_extra_keeps_its_types(tmp_path):
    net, _ = dense_and_trainer()
    rng = np.random.RandomState(3)
    extra = {"rng": rng.get_state(), "step": 7, (1, "a"): [None, True, 1.5, float("inf")],
             "nan": float("nan"), "scalar": np.float32(0.25), "ids": np.arange(5, dtype=np.int8),
             "nd": mx.nd.array([1, 2, 3], dtype="float16"), 3: "three"}
    checkpoint.save(tmp_path / "x.mxc", net, extra=extra)
    back = checkpoint.load(tmp_path / "x.mxc", net)
    assert sorted(map(str, back)) == sorted(map(str, extra))
    state = back["rng"]
    assert isinstance(state, tuple) and state[0] == "MT19937"
    assert state[1].dtype == np.uint32 and np.array_equal(state[1], rng.get_state()[1])
    assert back[(1, "a")][:3] == [None, True, 1.5] and back[(1, "a")][3] == float("inf")
    assert np.isnan(back["nan"]) and back[3] == "three"
    assert type(back["scalar"]) is np.float32 and back["scalar"] == np.float32(0.25)
    assert back["ids"].dtype == np.int8 and back["ids"].tolist() == [0, 1, 2, 3, 4]
    assert back["nd"].dtype == np.float16 and back["nd"].asnumpy().tolist() == [1, 2, 3]
    restored = np.random.RandomState(0)
    restored.set_state(state)
    assert restored.randint(1 << 30) == rng.randint(1 << 30)


@pytest.mark.parametrize("optimizer, kwargs", [
    ("sgd", {"momentum": 0.9, "multi_precision": True,
             "lr_scheduler": "factor"}),
    ("adam", {}), ("rmsprop", {"centered": True}), ("ftml", {}), ("dcasgd", {}),
    ("lars", {"momentum": 0.9}), ("nadam", {}), ("lamb", {}),
])
def test_optimizers_resume_bit_for_bit_without_pickle(tmp_path, optimizer, kwargs):
    def build():
        args = dict(kwargs)
        if args.get("lr_scheduler") == "factor":
            args["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5)
        return dense_and_trainer(optimizer, **args)

    net, trainer = build()
    for _ in range(3):
        dense_step(net, trainer)
    checkpoint.save(tmp_path / "o.mxc", net, trainer)
    net2, trainer2 = build()
    net2.weight.set_data(net2.weight.data() + 1)
    checkpoint.load(tmp_path / "o.mxc", net2, trainer2)
    assert trainer2._optimizer._index_update_count is \
        trainer2._optimizer._all_index_update_counts[0]
    for _ in range(3):
        dense_step(net, trainer)
        dense_step(net2, trainer2)
    for name in ("weight", "bias"):
        assert np.array_equal(getattr(net, name).data().asnumpy(),
                              getattr(net2, name).data().asnumpy()), name
    assert trainer2._optimizer.num_update == trainer._optimizer.num_update
    assert trainer2.learning_rate == trainer.learning_rate


def test_a_saved_schedule_needs_a_schedule_of_the_same_class(tmp_path):
    net, trainer = dense_and_trainer(lr_scheduler=mx.lr_scheduler.FactorScheduler(step=2))
    dense_step(net, trainer)
    checkpoint.save(tmp_path / "s.mxc", net, trainer)
    net2, trainer2 = dense_and_trainer()
    with pytest.raises(CheckpointError, match="learning-rate schedule FactorScheduler, this "
                                              "trainer's optimizer has none") as refused:
        checkpoint.load(tmp_path / "s.mxc", net2, trainer2)
    assert "\n" not in str(refused.value) and str(tmp_path / "s.mxc") in str(refused.value)
