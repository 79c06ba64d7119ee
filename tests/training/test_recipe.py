"""Fine-tuning through the real CLI, as experiment=finetune_mobilenet sets it up: a MobileNetV3Small
with weights from a file, its backbone frozen for epoch 1 (BatchNorm statistics included) and
trained from epoch 2; a run resumed across that point ends with the weights of an uninterrupted one
(`make test-all`: its two runs share one process, tests/docs_runner.py)."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from docs_runner import spawn_one_process_for

import app.objectives  # noqa: F401 - registers the loss the checkpoints were compiled with

SMALL = "+model.kwargs={minimalistic: true}"  # new keys of a mapping take `+` in Hydra


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    base = keras.applications.MobileNetV3Small(include_top=False, weights=None, input_shape=(32, 32, 3),
                                               pooling="avg", minimalistic=True)
    weights = root / "start.weights.h5"
    base.save_weights(weights)
    # the experiment on generated data instead of a folder; a constant rate, since run B is extended
    # from 1 epoch to 2 and a cosine schedule would be fitted to its first length
    config = ["experiment=finetune_mobilenet", "data=synthetic", "data.num_images=48", "data.source_size=64",
              "data.num_classes=3", "data.image_size=[32,32]", "data.batch_size=8", f"model.weights={weights}", SMALL,
              "scheduler=constant", "trainer.unfreeze_at_epoch=2", "trainer.deterministic=true", "queue.workers=0"]
    (done,) = spawn_one_process_for(["train", *config, "trainer.epochs=2", "hydra.run.dir=A"], cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, config, [np.array(w) for w in base.get_weights()]


def checkpoints(run: Path) -> list[keras.Model]:
    return [keras.saving.load_model(p / "model.keras") for p in sorted((run / "checkpoints").glob("step-*"))]


def backbone(net: keras.Model) -> list[np.ndarray]:
    head = next(layer for layer in net.layers if isinstance(layer, keras.Model))
    return next(layer for layer in head.layers if isinstance(layer, keras.Model)).get_weights()


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_the_frozen_backbone_keeps_the_files_weights_until_it_is_unfrozen(runs):
    root, _, start = runs
    after_one, after_two = checkpoints(root / "A")
    assert same(backbone(after_one), start)  # BatchNorm's moving statistics too: inference mode
    assert not same(backbone(after_two), start)  # negative control: trained from epoch 2
    log = (root / "A" / "train.log").read_text()
    assert "1,299 trainable" not in log and "epoch 2: the backbone is trained too from now on" in log
    assert "the plan is the frozen model's: from epoch 2 (trainer.unfreeze_at_epoch)" in log  # leave room, it says
    summary = json.loads((root / "A" / "summary.json").read_text())
    assert summary["tags"] == ["finetune", "mobilenet"]  # the experiment's, with its optimizer
    assert after_two.optimizer.__class__.__name__ == "AdamW"


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_resume_across_the_unfreeze_point_is_exact(runs):
    """B: one epoch, resumed to A's two. Covered in `make test` by: resumes being exact
    (tests/cli/test_resume_cli.py) and the unfreezing (the test above)."""
    root, config, _ = runs
    for done in spawn_one_process_for(["train", *config, "trainer.epochs=1", "hydra.run.dir=B"],
                                      ["train", f"resume={root / 'B'}", "trainer.epochs=2"], cwd=root):
        assert done.returncode == 0, done.stderr[-3000:]
    a, b = checkpoints(root / "A")[-1], checkpoints(root / "B")[-1]
    assert same(a.get_weights(), b.get_weights())
    assert int(a.optimizer.iterations) == int(b.optimizer.iterations) > 0
    assert "epoch 2: the backbone is trained too" in (root / "B" / "train.log").read_text()


def composed(*overrides: str):
    from hydra import compose, initialize_config_dir

    from app.config import conf_dir, load
    from app.schema import register

    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=list(overrides)))


def test_each_optimizer_preset_builds_its_keras_class():
    from app.training.recipe import build_optimizer

    sgd = build_optimizer(composed("optimizer=sgd", "optimizer.clipnorm=1.0"), 10)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == 0.9 and sgd.nesterov and sgd.clipnorm == 1.0
    adamw = build_optimizer(composed("optimizer=adamw", "optimizer.use_ema=true"), 10)
    assert isinstance(adamw, keras.optimizers.AdamW) and adamw.weight_decay == 0.004 and adamw.use_ema
    lion = build_optimizer(composed("optimizer=lion", "optimizer.global_clipnorm=2.0"), 10)
    assert isinstance(lion, keras.optimizers.Lion) and lion.global_clipnorm == 2.0
    assert float(lion.learning_rate) == pytest.approx(1e-4)
    # any Keras optimizer by _target_, with its own arguments through kwargs
    nadam = build_optimizer(composed("optimizer._target_=keras.optimizers.Nadam", "+optimizer.kwargs.beta_1=0.8"), 10)
    assert isinstance(nadam, keras.optimizers.Nadam) and nadam.beta_1 == 0.8


def lr_at(schedule, step: int) -> float:
    return float(schedule(step)) if callable(schedule) else float(schedule)


def test_schedules_over_epochs_times_steps():
    from app.training.recipe import learning_rate

    steps, peak = 10, 0.01  # trainer.epochs=8: 80 steps
    cosine = learning_rate(composed("scheduler=cosine", "optimizer.learning_rate=0.01"), steps)
    assert [lr_at(cosine, s) for s in (0, 5, 10)] == pytest.approx([0.0, peak / 2, peak])
    assert lr_at(cosine, 45) == pytest.approx(peak / 2, rel=1e-3) and lr_at(cosine, 80) == pytest.approx(0.0, abs=1e-9)
    step = learning_rate(composed("scheduler=step", "optimizer.learning_rate=0.01"), steps)  # every 3 epochs
    assert [lr_at(step, s) for s in (29, 30, 59, 60)] == pytest.approx([peak, peak * 0.1, peak * 0.1, peak * 0.01])
    multi = learning_rate(composed("scheduler=multistep", "optimizer.learning_rate=0.01"), steps)  # after 4 and 6
    assert [lr_at(multi, s) for s in (39, 40, 60)] == pytest.approx([peak, peak * 0.1, peak * 0.01])
    cycle = learning_rate(composed("scheduler=one_cycle", "optimizer.learning_rate=0.01"), steps)
    assert [lr_at(cycle, s) for s in (0, 24, 80)] == pytest.approx([0.04 * peak, peak, 1e-4 * peak])
    constant = learning_rate(composed("optimizer.learning_rate=0.01"), steps)
    assert lr_at(constant, 0) == lr_at(constant, 80) == peak  # negative control: no schedule, no change


def test_replaced_keys_are_refused_and_old_runs_are_read_translated():
    from app.cli.argv import claim_and_rewrite_argv
    from app.config import load
    from app.errors import ConfigError
    from app.runs.migrate import migrated

    with pytest.raises(ConfigError, match=r"`trainer.lr` was replaced: use optimizer.learning_rate"):
        claim_and_rewrite_argv(["trainer.lr=0.1"])
    with pytest.raises(ConfigError, match=r"`trainer.optimizer` was replaced: use optimizer=adam\|adamw"):
        claim_and_rewrite_argv(["trainer.optimizer=sgd"])
    from app.config import to_plain

    old = to_plain(composed())
    old.pop("optimizer"), old.pop("scheduler")
    old["trainer"].update(optimizer="sgd", lr=0.05)
    with pytest.raises(ConfigError, match="trainer"):  # negative control: as saved, today's schema refuses it
        load(old)
    config = load(migrated(old))
    assert config.optimizer._target_ == "keras.optimizers.SGD" and config.optimizer.learning_rate == 0.05
    assert config.optimizer.kwargs == {"momentum": 0.9, "nesterov": True}
    assert config.scheduler._target_ == "app.training.schedules.constant"
    with pytest.raises(ConfigError, match=r"`trainer.mixed_precision` was replaced: use trainer.precision="):
        claim_and_rewrite_argv(["trainer.mixed_precision=true"])
    mixed = to_plain(composed())
    mixed["trainer"].pop("precision")
    mixed["trainer"]["mixed_precision"] = True
    with pytest.raises(ConfigError, match="mixed_precision"):  # negative control
        load(mixed)
    assert load(migrated(mixed)).trainer.precision == "mixed_float16"


def test_accumulation_counts_updates_and_the_schedule_follows_them():
    from app.training.recipe import build_optimizer

    config = composed("trainer.grad_accum_steps=2", "scheduler=cosine", "scheduler.warmup_epochs=0",
                      "trainer.epochs=4")
    optimizer = build_optimizer(config, 10)  # 40 steps, 20 updates
    assert optimizer.gradient_accumulation_steps == 2
    schedule = optimizer._learning_rate  # the schedule object (the property gives its value now)
    assert float(schedule(10)) == pytest.approx(0.0005, rel=1e-3) and float(schedule(20)) == pytest.approx(0.0)


def test_more_accumulated_steps_than_the_run_takes_are_refused(tmp_path):
    """trainer.grad_accum_steps above the run's steps would train without a single update."""
    from app.errors import ConfigError
    from app.training.inputs import read_data

    tiny = ["data.num_images=24", "data.source_size=32", "data.num_classes=3", "data.batch_size=4",
            f"data.path={tmp_path / 'data'}", "trainer.epochs=2"]  # 18 training samples: 4 steps an epoch
    with pytest.raises(ConfigError, match=r"`trainer.grad_accum_steps` = 9 .* at most the steps the run takes, 8 "):
        read_data(composed(*tiny, "trainer.grad_accum_steps=9"), tmp_path)
    fixed = read_data(composed(*tiny, "trainer.grad_accum_steps=8"), tmp_path)
    assert fixed[1] == 4  # the fix passes


def test_class_weights_monitor_and_metric_names():
    from app.errors import ConfigError
    from app.tasks import task_of
    from app.training.recipe import Head, better, check_monitor, class_weights, metric_names, monitor_mode

    names, one, several_labels = ["cat", "dog", "owl"], task_of("multiclass").targets, task_of("multilabel").targets
    head = Head(names)
    labels = np.array([0] * 6 + [1] * 3 + [2] * 3)
    assert class_weights(composed().trainer, labels, names, targets=one) is None
    balanced = class_weights(composed("trainer.class_weight=balanced").trainer, labels, names, targets=one)
    assert balanced.tolist() == pytest.approx([12 / 18, 12 / 9, 12 / 9])
    mapped = class_weights(composed("trainer.class_weight={dog: 3.0}").trainer, labels, names, targets=one)
    assert mapped.tolist() == [1.0, 3.0, 1.0]
    with pytest.raises(ConfigError, match=r"`trainer.class_weight`.*not emu"):
        class_weights(composed("trainer.class_weight={emu: 3.0}").trainer, labels, names, targets=one)
    assert metric_names(composed("trainer.top_k=2").trainer, head) == ["accuracy", "top2_accuracy", "recall_cat",
                                                               "recall_dog", "recall_owl"]
    assert metric_names(composed().trainer, head)[:2] == ["accuracy", "recall_cat"]  # top-5 of 3 classes says nothing
    check_monitor(composed("trainer.monitor=val_recall_owl").trainer, head)
    with pytest.raises(ConfigError, match=r"`trainer.monitor`.*val_top2_accuracy"):
        check_monitor(composed("trainer.monitor=val_top5_accuracy", "trainer.top_k=2").trainer, head)
    several = Head(names, task_of("multilabel"))
    assert metric_names(composed().trainer, several)[:5] == ["auc", "map", "precision", "recall", "f1_cat"]
    check_monitor(composed("trainer.monitor=val_map").trainer, several)
    vectors = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [1, 0, 0]], np.uint8)  # positives 3, 1, 1 of 4
    assert class_weights(composed("trainer.class_weight=balanced").trainer, vectors, names,
                         targets=several_labels).tolist() == \
        pytest.approx([1 / 3, 3.0, 3.0])
    loss = monitor_mode(composed().trainer, head.monitor(composed("trainer.monitor=val_loss").trainer))
    accuracy = monitor_mode(composed().trainer, head.monitor(composed().trainer))
    assert (loss, accuracy, several.monitor(composed().trainer)) == ("min", "max", "val_auc")  # auto by task
    assert better(loss, 0.5, 0.6) and not better(loss, 0.7, 0.6)
    assert better(accuracy, 0.7, 0.6) and not better(accuracy, 0.5, 0.6) and better(accuracy, 0.0, None)


def test_class_weights_reach_the_loss():
    from app.model import classifier
    from app.training.steps import EpochFigures, EpochPlan, Feed, train_epoch

    def net():
        keras.utils.set_random_seed(0)
        backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3,
                                     activation="softmax")])
        model = classifier(backbone, (8, 8))
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        return model

    def batches():
        rng = np.random.default_rng(0)
        for _ in range(3):
            yield rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8), np.array([0, 1, 2, 0])

    weighted, plain = net(), net()
    before = [w.copy() for w in weighted.get_weights()]
    callbacks = keras.callbacks.CallbackList([], model=weighted)
    figures = train_epoch(weighted, Feed(batches(), 3, np.zeros(3, np.float32)), callbacks, EpochFigures(),
                          EpochPlan(steps=3, batch_size=4))
    assert figures.logs["loss"] == 0 and same(before, weighted.get_weights())
    # negative control: unweighted, the same batches move the weights
    train_epoch(plain, Feed(batches(), 3), keras.callbacks.CallbackList([], model=plain), EpochFigures(),
                EpochPlan(steps=3, batch_size=4))
    assert not same(before, plain.get_weights())
