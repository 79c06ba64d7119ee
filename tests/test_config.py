"""Config composition and every validation error, through Hydra's compose API and the CLI."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_runner import spawn_one_process_for
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from app.augment import build_compose
from app.config import conf_dir, load, to_plain, validate
from app.errors import ConfigError
from app.schema import option_of, register

register()


def composed(*overrides: str, name: str = "config"):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def test_defaults_compose_and_validate():
    cfg = composed()
    validate(cfg)
    assert cfg.data._target_ == "app.data.sources.synthetic.synthetic_source" and cfg.data.source_size >= 1024
    # null: the machine's (auto where training sees an accelerator, else 2: tests/capacity/test_auto.py)
    assert cfg.queue.workers is None and cfg.queue.use_multiprocessing and cfg.queue.max_size is None
    assert to_plain(cfg)["queue"]["start_method"] == "forkserver"
    # the augmentation's crop follows data.image_size
    assert to_plain(composed("data.image_size=[48,40]"))["augment"]["transforms"][0]["size"] == [48, 40]


SEGMENTATION = ["data=folder", "data.path=x", "data.task=segmentation", "data.masks=m", "data.classes=[a,b,c]"]


@pytest.mark.parametrize("name", ["synthetic", "cifar", "folder", "prepared"])
def test_each_data_source_composes(name):
    cfg = composed(f"data={name}", "data.path=/x")
    assert option_of("data", cfg.data._target_) == name
    validate(cfg)


@pytest.mark.parametrize(("override", "key"), [
    ("queue.timeout_s=abc", "queue.timeout_s"),
    ("queue.maxsize=2", "queue.maxsize"),
    ("queue.start_method=fork", "queue.start_method"),
    ("data.batch_size=big", "data.batch_size"),
    ("optimizer=adamm", "optimizer"),
    ("trainer.precision=float64", "trainer.precision"),
    ("trainer.strategy=tpu", "trainer.strategy"),
    ("trainer.backend=torch", "trainer.backend"),
    ("hparams_search=lr_optun", "hparams_search"),  # a misspelt search is not silently no search
])
def test_type_and_key_errors_fail_at_composition(override, key):
    with pytest.raises(Exception) as caught:
        composed(override)
    text = str(caught.value) + str(caught.value.__cause__)
    assert key in text


@pytest.mark.parametrize(("overrides", "key"), [
    (["queue.max_size=0"], "queue.max_size"),
    (["data.batch_size=-1"], "data.batch_size"),
    (["data=folder"], "data.path"),
    (["queue.workers=-1"], "queue.workers"),
    (["queue.max_size=abc"], "queue.max_size"),  # an integer or auto: checked by the rules (the type is Any)
    (["queue.workers=fast"], "queue.workers"),
    (["queue.workers=true"], "queue.workers"),
    (["data.val_fraction=1.5"], "data.val_fraction"),
    (["trainer.epochs=0"], "trainer.epochs"),
    (["data.image_size=[64]"], "data.image_size"),
    # each model target has its own keys and rules, checked before any model is built
    (["model=keras_app", "model.name=Xception", "data.image_size=[64,64]"], "data.image_size"),
    (["model=keras_app", "model.name=ResNet51"], "model.name"),
    (["model=keras_app", "model.weights=/no/such/file.weights.h5"], "model.weights"),
    (["model=keras_app", "model.pooling=mean"], "model.pooling"),
    (["trainer.unfreeze_at_epoch=2"], "trainer.unfreeze_at_epoch"),
    (["model=keras_app", "model.freeze_backbone=true", "trainer.unfreeze_at_epoch=1"], "trainer.unfreeze_at_epoch"),
    (["model._target_=keras.applications.MobileNetV3Small"], "model._target_"),
    (["model=keras_app", "+model.widths=[8]"], "model.widths"),
    # the recipe's groups
    (["scheduler=cosine", "trainer.callbacks=[{_target_: keras.callbacks.ReduceLROnPlateau}]"], "trainer.callbacks[0]"),
    (["scheduler=multistep", "scheduler.milestones=[9]"], "scheduler.milestones"),
    (["optimizer.learning_rate=0"], "optimizer.learning_rate"),
    (["augment.eval_transform=middle"], "augment.eval_transform"),
    (["optimizer.clipnorm=1", "optimizer.global_clipnorm=1"], "optimizer.global_clipnorm"),
    (["data=folder", "data.path=/x", "data.test_fraction=0.8"], "data.test_fraction"),
    (["data=prepared", "data.path=/x", "data.val_fraction=0.2"], "data.val_fraction"),  # the copy's split
    (["data=prepared", "data.path=s3://b/c", "data.cache_max_gb=0"], "data.cache_max_gb"),
    (["data=prepared", "data.path=/x", "data.cache_dir=/cache"], "data.cache_dir"),  # a local copy is read in place
    (["data=folder", "data.path=s3://b/images"], "data.path"),  # folder sources read local folders
    # the debugging keys
    (["trainer.validation_steps=0"], "trainer.validation_steps"),
    (["trainer.overfit_batches=-1"], "trainer.overfit_batches"),
    (["trainer.profile_steps=[5,2]"], "trainer.profile_steps"),
    (["trainer.profile_steps=[0,2]"], "trainer.profile_steps"),
    # seeds: Keras and NumPy take 0 to 2**32 - 1 only
    (["seed=-1"], "seed"),
    (["seed=4294967296"], "seed"),
    (["data.seed=-1"], "data.seed"),
    # devices
    (["trainer.cpu_devices=2"], "trainer.cpu_devices"),
    (["trainer.strategy=mirrored", "trainer.cpu_devices=0"], "trainer.cpu_devices"),
    (["trainer.backend=jax", "trainer.strategy=mirrored"], "trainer.strategy"),
    (["trainer.strategy=data_parallel"], "trainer.strategy"),  # keras.distribution is JAX's
    (["trainer.num_processes=2"], "trainer.num_processes"),  # several processes: data_parallel only
    (["trainer.backend=jax", "trainer.strategy=data_parallel", "trainer.num_processes=2"], "trainer.coordinator"),
    (["trainer.backend=jax", "trainer.strategy=data_parallel", "trainer.coordinator=h:1", "trainer.num_processes=2",
      "trainer.process_id=2"], "trainer.process_id"),
    (["trainer.backend=jax", "trainer.strategy=data_parallel", "trainer.coordinator=host", "trainer.num_processes=2",
      "trainer.process_id=1"], "trainer.coordinator"),
    # patches of large images
    (["data=folder", "data.path=x", "data.patches.size=[32]"], "data.patches.size"),
    (["data=folder", "data.path=x", "data.patches.size=[32,32]", "data.patches.stride=[0,32]"], "data.patches.stride"),
    (["data=folder", "data.path=x", "data.patches.size=[32,32]", "data.patches.level=1", "data.patches.mpp=0.5"],
     "data.patches.mpp"),
    (["data=folder", "data.path=x", "data.patches.size=[32,32]", "data.patches.downsample=0.5"],
     "data.patches.downsample"),
    (["data=folder", "data.path=x", "data.patches.size=[32,32]", "data.patches.min_foreground=2"],
     "data.patches.min_foreground"),
    (["data=table", "data.table=t.csv", "data.columns.x=x"], "data.columns.y"),
    (["data=table", "data.table=t.csv", "data.columns.x=x", "data.columns.y=y"], "data.patches.size"),
    (["data=table", "data.table=t.csv", "data.label_separator=' '", "data.task=multilabel",
      "data.patches.size=[32,32]"], "data.task"),
    # a class a pixel without masks to read (the rest: test_a_class_a_pixels_refusals_name_the_key)
    (["data.task=segmentation", "data.classes=[a,b]"], "data.task"),  # synthetic data has no masks
    (["data=table", "data.table=t.csv", "data.task=segmentation", "data.classes=[a,b]"], "data.columns.mask"),
])
def test_range_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=re.escape(f"`{key}`")):
        validate(composed(*overrides))


# (key, value, the key refused): a value set on a composed config, as an override would set it
PIXEL_FAULTS = [("data.masks", None, "data.masks"), ("data.classes", ["a"], "data.classes"),
                ("data.classes", ["a", "a"], "data.classes"), ("data.ignore_index", 1, "data.ignore_index"),
                ("data.sampling", "balanced", "data.sampling"), ("trainer.loss", "focal", "trainer.loss"),
                ("trainer.class_weight", "balanced", "trainer.class_weight"),
                ("trainer.label_smoothing", 0.1, "trainer.label_smoothing"),
                ("data.masks_background", "d", "data.masks_background")]
LABEL_FAULTS = [("data.masks", "m", "data.masks"), ("data.ignore_index", 255, "data.ignore_index"),
                ("data.masks_background", "a", "data.masks_background"),
                ("trainer.loss", "dice", "trainer.loss"), ("data.classes", ["a", "b"], "data.classes")]


def test_a_class_a_pixels_refusals_name_the_key():
    """Where masks come from, what their values name, what counts pixels; and what one label an image refuses."""
    pixels, labels = composed(*SEGMENTATION), composed("data=folder", "data.path=x")
    validate(copy.deepcopy(pixels))  # negative control: each config passes as composed
    validate(copy.deepcopy(labels))
    for base, faults in ((pixels, PIXEL_FAULTS), (labels, LABEL_FAULTS)):
        for key, value, refused in faults:
            cfg = copy.deepcopy(base)
            OmegaConf.update(cfg, key, value)
            with pytest.raises(ConfigError, match=re.escape(f"`{refused}`")):
                validate(cfg)
    table = composed("data=table", "data.table=t.csv", "data.columns.mask=m")
    with pytest.raises(ConfigError, match="`data.columns.mask`"):
        validate(table)


def test_good_values_pass_the_same_checks(tmp_path):  # negative control for the range checks
    validate(composed("seed=4294967295", "data.seed=0"))
    validate(composed("data=prepared", "data.path=s3://b/c", "data.cache_dir=/cache", "data.cache_max_gb=0.5"))
    validate(composed("queue.max_size=1", "data.batch_size=1", "queue.workers=0", "data=folder", "data.path=/x",
                      "data.test_fraction=0.7"))
    weights = tmp_path / "w.weights.h5"
    weights.write_bytes(b"")
    validate(composed("model=keras_app", "model.name=Xception", "data.image_size=[71,71]", f"model.weights={weights}",
                      "model.freeze_backbone=true", "trainer.unfreeze_at_epoch=2"))
    validate(composed("model=custom", "model._target_=my.builder", "+model.kwargs.depth=3"))
    validate(composed("trainer.callbacks=[{_target_: keras.callbacks.ReduceLROnPlateau}]", "scheduler=constant"))
    validate(composed("trainer.strategy=mirrored", "trainer.cpu_devices=2", "trainer.precision=mixed_bfloat16"))
    validate(composed("trainer.backend=jax", "trainer.strategy=data_parallel", "trainer.coordinator=10.0.0.1:1234",
                      "trainer.num_processes=2", "trainer.process_id=1"))
    validate(composed(*SEGMENTATION, "data.ignore_index=255", "trainer.loss=crossentropy+dice",
                      "trainer.class_weight={b: 2.0}"))
    validate(composed(*SEGMENTATION, "data.patches.size=[32,32]", "data.masks_background=a"))  # polygons on slides
    validate(composed("data=table", "data.table=t.csv", "data.task=segmentation", "data.columns.mask=m",
                      "data.classes=[a,b]", "data.ignore_index=65535", "trainer.loss=dice"))
    validate(composed("data=prepared", "data.path=/copy", "data.task=segmentation", "data.classes=[a,b]"))


def test_misspelt_transform_argument_fails_strictly():
    shipped = to_plain(composed())["augment"]["transforms"]
    build_compose(shipped, [64, 64])  # negative control: the shipped list builds
    misspelt = [*shipped, {"_target_": "albumentations.HorizontalFlip", "pp": 0.5}]
    with pytest.raises(ConfigError, match=r"augment.transforms\[3\].*'pp'"):
        build_compose(misspelt, [64, 64])
    with pytest.raises(ConfigError, match=r"augment.transforms\[0\]"):
        build_compose([{"_target_": "albumentations.NoSuchTransform"}], [64, 64])


def test_conf_ships_in_the_package_build(tmp_path):
    """`pip install .` must carry conf/ inside the package (app/conf/...)."""
    import zipfile

    root = Path(__file__).parent.parent
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(root)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("app-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(root / "conf").as_posix() for p in (root / "conf").rglob("*.yaml")}
    assert shipped and {f"app/conf/{n}" for n in shipped} <= names
    modules = {p.relative_to(root).as_posix() for p in (root / "app").rglob("*.py")}
    assert "app/loader/enqueuer.py" in modules and modules <= names, sorted(modules - names)


CLI_ERRORS = [
    (["queue.max_size=0"], "queue.max_size"),
    (["queue.max_size=abc"], "queue.max_size"),
    (["data.batch_size=-1"], "data.batch_size"),
    (["queue.maxsize=2"], "queue.maxsize"),
    (["queue.start_method=fork"], "queue.start_method"),
    (["data=folder"], "data.path"),
    (["data.sampling=weights"], "data.sampling"),  # the weights are a table's column
    (["data=table"], "data.table"),
    (["data=table", "data.table=t.csv", "data.classes=[a,a]"], "data.classes"),
    (["data=table", "data.table=t.csv", "data.columns.split=split", "data.test_fraction=0.2"], "data.test_fraction"),
    (["augment.transforms=[{_target_: albumentations.RandomResizedCrop, size: [8, 8], scle: [0.5, 1]}]"],
     "augment.transforms[0]"),
    (["+trainer.foo=1"], "trainer.foo"),  # `+` added a key past Hydra's check
    (["queue.workers=1000"], "queue.workers"),
    # checked before the data, not after it and TensorFlow's start
    (["trainer.callbacks=[{_target_: keras.callbacks.EarlyStoping}]"], "trainer.callbacks[0]"),
    # BackupAndRestore would fight the run's own checkpoints; resume= does its job
    (["trainer.callbacks=[{_target_: keras.callbacks.BackupAndRestore, backup_dir: b}]"], "resume=latest"),
    (["trainer.jit_compile=maybe"], "trainer.jit_compile"),
    (["trainer.lr=0.01"], "optimizer.learning_rate"),  # a replaced key names its successor
    # a checkpoint falls between two calls into the compiled step
    (["trainer.steps_per_execution=4", "trainer.checkpoint_every_steps=6"], "trainer.checkpoint_every_steps"),
]


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> tuple[Path, list]:
    """Each of CLI_ERRORS's command lines, `python -m app train` in one process (tests/docs_runner.py:
    the CLI's own main, one after another), each with a folder of its own for its data and run."""
    root = tmp_path_factory.mktemp("refused")
    argvs = [["train", *overrides, f"hydra.run.dir={i}/run",
              *([] if {"data=folder", "data=table"} & set(overrides) else [f"data.path={root / str(i) / 'datasets'}"])]
             for i, (overrides, _) in enumerate(CLI_ERRORS)]
    return root, spawn_one_process_for(*argvs, cwd=root)


@pytest.mark.slow
@pytest.mark.parametrize(("case", "key"), list(enumerate(key for _, key in CLI_ERRORS)),
                         ids=[overrides[0][:30] for overrides, _ in CLI_ERRORS])
def test_cli_exits_before_any_work(refused, case, key):
    root, results = refused
    result, folder = results[case], root / str(case)
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert key in message and "Traceback" not in result.stderr
    assert not (folder / "datasets").exists()  # no data generated or read
    assert not (folder / "run").exists() or any((folder / "run").iterdir())  # no empty run directory left either
    assert not list(folder.rglob("metrics.csv")) and not list(folder.rglob("checkpoints"))
    # Hydra stops a wrong type or key before any job; a job that starts and meets a bad value
    # is on record as failed, with the reason
    for summary in folder.rglob("summary.json"):
        recorded = json.loads(summary.read_text())
        assert recorded["status"] == "failed" and key in recorded["message"]


def test_yaml_files_mirror_the_schema():
    for group in ("data", "augment", "queue", "model", "trainer"):
        files = list((conf_dir() / group).glob("*.yaml"))
        assert files, group
        for f in files:
            assert f"{f.stem if group in ('data', 'model') else group}_schema" in OmegaConf.load(f).defaults[0]


@pytest.mark.parametrize(("override", "key"), [("+trainer.foo=1", "trainer.foo"), ("+bar=2", "bar"),
                                               ("+data.decode.x=1", "data.decode.x")])
def test_keys_added_with_plus_are_refused(override, key):
    """Hydra lets `+key=` add a key to a structured config; validate does not."""
    cfg = composed(override)
    assert OmegaConf.select(cfg, key) is not None  # Hydra took it: the check below is ours
    with pytest.raises(ConfigError, match=rf"`{key}` is not allowed.*Allowed keys there"):
        validate(cfg)


def test_a_saved_config_without_a_newer_key_takes_its_default():
    saved = to_plain(composed())
    del saved["data"]["max_image_pixels"], saved["queue"]["worker_limit"]
    cfg = validate(saved)
    assert cfg.data.max_image_pixels == 89_478_485 and cfg.queue.worker_limit is None


def test_worker_count_is_bounded_by_the_machine_unless_told():
    """Queue.workers=1000 started 44 processes before anyone stopped it."""
    import os

    limit = 4 * (os.cpu_count() or 1)
    validate(composed(f"queue.workers={limit}"))  # negative control: at the limit is fine
    with pytest.raises(ConfigError, match=rf"`queue.workers` = {limit + 1} is not allowed: at most {limit} on this "
                                          r"machine \(4 a core × \d+ cores\); more") as refused:
        validate(composed(f"queue.workers={limit + 1}"))
    # one figure: the memory guess, which the memory plan's measured one contradicted, only where it binds
    assert "GiB available" not in str(refused.value)
    validate(composed("queue.workers=1000", "queue.worker_limit=1000"))  # for people who know better
    with pytest.raises(ConfigError, match="at most queue.worker_limit=4"):
        validate(composed("queue.workers=5", "queue.worker_limit=4"))


def test_where_memory_binds_the_worker_limit_names_it(monkeypatch):
    import os
    from types import SimpleNamespace

    import psutil

    from app.processes import worker_limit

    cores = os.cpu_count() or 1
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=250 * 2**20))
    assert worker_limit() == (2, "0.2 GiB available / ~100 MiB a worker")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=2**40))  # negative control
    assert worker_limit() == (4 * cores, f"4 a core × {cores} cores")


def test_load_gives_the_one_typed_object_also_from_a_saved_run():
    """Config is validated once and travels as the schemas' dataclasses, whether composed by
    Hydra or read back from a run's state.json (a plain dict)."""
    from app.schema import CifarDataConfig, Config, QueueConfig, StartMethod

    config = load(composed("data=cifar", "queue.max_size=3"))
    assert isinstance(config, Config) and isinstance(config.data, CifarDataConfig)
    assert isinstance(config.queue, QueueConfig) and config.queue.start_method is StartMethod.forkserver
    again = load(to_plain(config))  # what a run saves, loaded back
    assert again == config and to_plain(again) == to_plain(config)
    with pytest.raises(ConfigError, match="queue.max_size"):  # negative control: it validates too
        load({**to_plain(config), "queue": {**to_plain(config)["queue"], "max_size": 0}})


@pytest.mark.parametrize(("command", "override", "key"), [("bench", "bench.modes=[loader,fast]", "bench.modes"),
                                                          ("bench", "bench.batches=0", "bench.batches"),
                                                          ("bench", "bench.warmup=-1", "bench.warmup"),
                                                          ("preview", "preview.images=0", "preview.images")])
def test_bench_and_preview_keys_are_checked_with_the_rest(command, override, key):
    """In their commands' own configs (conf/bench.yaml, preview.yaml), the only ones that hold them."""
    validate(composed("bench.modes=[loader,serial]", "bench.batches=1", "bench.warmup=0", name="bench"))
    validate(composed("preview.images=1", name="preview"))  # negative control: the edges pass
    with pytest.raises(ConfigError, match=re.escape(f"`{key}`")):
        validate(composed(override, name=command))


def test_experiments_are_complete_recipes_and_debug_modes_apply_after_them():
    """Experiment= sets groups and keys; debug= comes after it; the command line last."""
    cifar = composed("experiment=cifar_resnet")
    validate(cifar)
    assert (cifar.data._target_, cifar.model._target_, cifar.optimizer._target_, cifar.scheduler._target_) == \
        ("app.data.sources.cifar.cifar_source", "app.model.small_resnet", "keras.optimizers.SGD",
         "app.training.schedules.cosine")
    assert list(cifar.tags) == ["cifar", "resnet"] and cifar.trainer.epochs == 30
    assert [t["_target_"].split(".")[-1] for t in to_plain(cifar)["augment"]["transforms"]] == \
        ["PadIfNeeded", "RandomCrop", "HorizontalFlip"]
    tune = composed("experiment=finetune_mobilenet", "data.path=/x")
    validate(tune)
    assert (option_of("data", tune.data._target_), tune.model.name, tune.model.weights, tune.model.freeze_backbone) == \
        ("folder", "MobileNetV3Small", "imagenet", True)
    assert tune.trainer.unfreeze_at_epoch == 3 and tune.optimizer._target_ == "keras.optimizers.AdamW"
    fast = composed("experiment=cifar_resnet", "debug=fast", "trainer.steps_per_epoch=3")
    validate(fast)  # the warm-up longer than the one debug epoch is dropped
    assert (fast.trainer.epochs, fast.trainer.steps_per_epoch, fast.trainer.validation_steps) == (1, 3, 2)
    assert fast.queue.workers == 0 and list(fast.data.image_size) == [32, 32]
    assert option_of("data", fast.data._target_) == "cifar"
    overfit = composed("debug=overfit")
    assert overfit.trainer.overfit_batches == 1 and not overfit.augment.transforms
    assert list(composed("debug=profile").trainer.profile_steps) == [5, 8]
    plain = composed()  # negative control: none of it by default
    assert (option_of("data", plain.data._target_), list(plain.tags), plain.trainer.overfit_batches,
            plain.trainer.profile_steps) == ("synthetic", [], 0, None)


def test_auto_is_the_one_word_the_queue_takes():
    """Queue.workers and queue.max_size take an integer, `auto` or null, which travel as such in the
    loaded config until training resolves them."""
    config = load(composed("queue.workers=auto", "queue.max_size=auto"))
    assert config.queue.workers == "auto" and config.queue.max_size == "auto"
    assert load(composed("queue.workers=3", "queue.max_size=4")).queue.workers == 3
    assert load(composed("queue.workers=null")).queue.workers is None
    with pytest.raises(ConfigError, match="`queue.max_size` = 'Auto' is not allowed: an integer, auto"):
        validate(composed("queue.max_size=Auto"))  # negative control: only the word itself


def test_a_resumed_run_takes_the_bad_sample_advice_and_nothing_unsafe():
    """A bad sample's message advises data.on_bad_sample=skip (and data.max_bad_fraction): a
    resumed run must accept what it advises; the data's own settings stay refused."""
    from app.runs.saved import resumed_config

    saved = to_plain(composed())
    cfg = composed("data.on_bad_sample=skip", "data.max_bad_fraction=0.2", "+resume=/runs/x")
    config = resumed_config(saved, cfg, ["resume=/runs/x", "data.on_bad_sample=skip", "data.max_bad_fraction=0.2"])
    assert config.data.on_bad_sample == "skip" and config.data.max_bad_fraction == 0.2
    with pytest.raises(ConfigError, match="`data.val_fraction` cannot change for a run that exists"):
        resumed_config(saved, composed("data.val_fraction=0.3", "+resume=/runs/x"), ["data.val_fraction=0.3"])


def test_the_out_of_memory_advice_for_a_run_works_when_followed():
    """The advice names only keys a resumed run takes, in a command that is accepted."""
    import re as regex

    from app.errors import explain
    from app.runs.saved import resumed_config

    message = str(explain(MemoryError(), resume_hint="python -m app train resume=/runs/x"))
    command = regex.search(r"`(python -m app train resume=/runs/x[^`]*)`", message).group(1)
    overrides = command.split()[4:]
    assert overrides == ["resume=/runs/x", "queue.max_size=1"]
    config = resumed_config(to_plain(composed()), composed("queue.max_size=1", "+resume=/runs/x"), overrides)
    assert config.queue.max_size == 1
    assert "data.batch_size" not in message.split("start a new run")[0]  # the rest takes a new run
    fresh = str(explain(MemoryError()))  # negative control: a new run may lower anything
    assert "lower data.batch_size, queue.max_size, queue.workers or data.image_size" in fresh


def test_backend_auto_becomes_the_framework_installed_here_once_validated():
    """TensorFlow is installed here (the no-TensorFlow venv's run shows JAX's side)."""
    assert composed().trainer.backend == "auto"
    assert validate(composed()).trainer.backend == "tensorflow"
    assert validate(composed("trainer.backend=jax")).trainer.backend == "jax"  # a backend given is kept
