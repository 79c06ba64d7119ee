"""`python -m app plan [overrides]`: the memory a training run of this config will take, before
it starts: host memory part by part (this machine's probe for TensorFlow's and a worker's own
cost, app/machine_probe.py; the batches, the ring, the workers' decodes), the device's apart
(the float32 batch, parameters, optimizer state, activations); the predicted host peak against
`queue.memory_budget_mb` or the memory available, with the fixes when it does not fit; then the
seed article's table of batch × resolution with the config's own marked. Writes plan.json.
The config is train's; builds the model (Keras) but reads no image beyond the files' headers,
unless queue.workers or queue.max_size is `auto`: then it runs train's probe
(app/training/autotune.py) and plans for what it chooses.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from app.config import conf_dir, load
from app.schema import register

log = logging.getLogger("app.plan")
register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from app import memory_plan
    from app.data import load_source
    from app.frameworks import use_backend
    from app.machine_probe import measured
    from app.training import autotune, queue_plan
    from app.training.rundir import write_json

    config = load(cfg)
    use_backend(config.trainer)
    source = load_source(config.data)
    probe = measured()  # here, unlike train, a plan is the point: a failed probe is the command's error
    net, gpus = _model(config, source)
    plans = queue_plan.planner(config, source.train, net, device_is_host=not gpus)
    choice = queue_plan.probed(config, source.train, net, plans)
    if choice:
        config = autotune.applied(config, choice)
        print(f"queue.workers={config.queue.workers} queue.max_size={config.queue.max_size} "
              f"(auto, from a probe of the data and the step: {choice.reason})\n")
    plan = plans.for_queue(config.queue.workers, config.queue.max_size)
    name, limit = memory_plan.limit(config)
    fixed = memory_plan.fixes(plan, probe, plans.facts, limit) if plan.host_mib > limit else []
    print(memory_plan.render(plan, (name, limit), fixed))
    print()
    print(memory_plan.article_table(config.data.batch_size, tuple(config.data.image_size)))
    out = Path(HydraConfig.get().runtime.output_dir) / "plan.json"
    write_json(out, {**plan.record(), "limit": {"name": name, "mib": round(limit, 1)}, "fixes": fixed,
                     "gpus": gpus, "probe": probe.__dict__, "queue_auto": choice.record() if choice else None})
    print(f"\nwritten: {out}")
    return plan.host_mib


def _model(config, source):
    """(the model, the GPUs the backend sees): the model built and compiled as `train` builds
    it, on one device."""
    from app import model as models
    from app.frameworks import load_keras
    from app.training import recipe

    keras = load_keras()
    if config.trainer.backend == "jax":
        import jax

        gpus = [str(d) for d in jax.devices() if d.platform == "gpu"]
    else:
        import tensorflow as tf

        gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
    keras.mixed_precision.set_global_policy(config.trainer.precision.value)
    net = models.build(config.model, config.data.image_size, len(source.class_names))
    steps = config.trainer.steps_per_epoch or max(1, len(source.train) // config.data.batch_size)
    recipe.compile_new(net, config, steps, source.class_names)
    return net, gpus
