"""Every command shown in README.md and docs/*.md (in an indented or fenced block) runs here as the
page shows it, so the documents cannot rot: in page order, README first, in one working directory,
so a page's commands can build on each other (train, then resume=latest, then evaluate).

What the test changes, and only that: the sizes, forced small (TINY_SIZES, a patch's, and MOST_EPOCHS,
appended, and a later override wins); what a command leaves unset, made small (TINY_DEFAULTS: among them
queue.workers=0, the batches built in the command's own process: the pages' commands are what is checked here, worker
processes are every loader and CLI test's); the documents' placeholders (PLACEHOLDERS) made the test's own folder
of images and its runs. A `$ command` followed by its output must print lines of that output's form (numbers
aside). A command that cannot run here is listed in SKIPPED with why, and a page that shows one says so.

The TensorFlow commands on one device run one after another in one process
(tests/docs_runner.py: the CLI's own `main`, as `python -m app` calls it), so TensorFlow loads
once; a command on JAX or on several devices runs in a process of its own, as its backend and
devices must be set before they load. Those stand alone (a train on the default data), so they
run beside the page-order process, each in a working directory of its own.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tifffile
from docs_runner import OWN_PROCESS
from PIL import Image
from segmentation_data import write_raster_set, write_texture_folder
from slides import write_annotated_slides, write_slides

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
APP = re.compile(r"^(\.venv/bin/)?python -m app(\s|$)")
SKIPPED = {
    "srun ": "needs a SLURM cluster",
    "hydra/launcher=slurm": "needs a SLURM cluster (Hydra's submitit launcher)",
    "trainer.coordinator=": "needs several hosts",
    "make test-fast": "is this test suite's unit tests, which `make test` runs too",
    "make test-all": "is this test suite with its exhaustive variants, which `make test` leaves out",
    "make test": "is this test suite, which CI runs",
    "bin/tensorboard ": "is a server that runs until stopped; tests/tracking/test_dashboards.py reads the event "
                        "files it shows with TensorBoard's own reader",
    "bin/mlflow ui ": "is a server that runs until stopped (the full `mlflow` package's); tests/cli/test_resume_cli.py "
                      "reads the store it shows with MLflow's own client",
}
TINY_SIZES = {"train": ["data.image_size=[32,32]", "data.batch_size=4"],
              "preview": ["data.image_size=[32,32]", "data.batch_size=4"],
              "bench": ["data.image_size=[32,32]", "data.batch_size=4", "bench.modes=[loader]", "bench.batches=2",
                        "bench.warmup=1", "bench.memory=false"]}
TINY_DEFAULTS = {"trainer.epochs": "1", "queue.workers": "0", "model.widths": "[8]",
                 "data.num_images": "24", "data.source_size": "48", "data.num_classes": "2"}
MOST_EPOCHS = 3  # a page's trainer.epochs=10 or 20, cut to this (a fine-tune unfreezing at epoch 3 still does)
DATA_KEYS = {"synthetic": ("data.num_images", "data.source_size", "data.num_classes"), "folder": (), "cifar": (),
             "prepared": (), "table": ()}
LOG_PREFIX = re.compile(r"^\[[^\]]*\]\[[^\]]*\]\[[^\]]*\] - ")


def placeholders(tmp: Path) -> dict[str, str]:
    return {"/some/images": str(tmp / "images"), "/data/flowers": str(tmp / "images"), "$HOME": str(tmp / "home"),
            "/data/scans": str(tmp / "scans"), "/data/planet": str(tmp / "planet"), "/data/tiles": str(tmp / "tiles"),
            "/data/slides": str(tmp / "slides"), "/data/tissue": str(tmp / "tissue"),
            "/data/landcover": str(tmp / "landcover"), "/data/annotated": str(tmp / "annotated")}


def documented() -> list[dict]:
    """Each command of every page: {"page", "line", "text", "output"} (`output`: the lines a
    `$ command` is shown printing), or {"page", "line", "python"} for a Python snippet."""
    found = []
    for page in DOCS:
        lines = page.read_text().splitlines()
        fence, i = None, 0
        while i < len(lines):
            line, stripped = lines[i], lines[i].strip()
            if stripped.startswith("```"):
                if fence is None:
                    fence, start = stripped[3:] or "text", i + 1
                else:
                    if fence == "python":
                        found.append({"page": page.name, "line": start, "python": "\n".join(lines[start:i])})
                    fence = None
                i += 1
                continue
            shown = stripped[2:] if stripped.startswith("$ ") else stripped
            in_block = fence is not None or line.startswith("    ")
            command = APP.match(shown) or shown.startswith(("make ", "srun ", ".venv/bin/"))
            if in_block and fence != "python" and command:
                start, text = i + 1, shown
                while text.endswith("\\"):
                    i += 1
                    text = text[:-1].rstrip() + " " + lines[i].strip()
                output = []
                if stripped.startswith("$ "):
                    while i + 1 < len(lines) and lines[i + 1].startswith("    ") and \
                            not lines[i + 1].strip().startswith("$ "):
                        i += 1
                        output.append(lines[i].strip())
                found.append({"page": page.name, "line": start, "text": re.sub(r"\s+#\s.*$", "", text),
                              "output": output})
            i += 1
    return found


def argv_of(command: dict, tmp: Path) -> list[str] | None:
    """The `python -m app` arguments a documented command line runs here, tiny; None when skipped."""
    text = command["text"]
    if any(mark in text for mark in SKIPPED):
        return None
    for shown, here in placeholders(tmp).items():
        text = text.replace(shown, here)
    text = re.sub(r"outputs/multirun/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", "{LAST_SWEEP}", text)
    text = re.sub(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", "{LAST_RUN}", text)
    if text == "make train":
        made = subprocess.run(["make", "-n", "train"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert ".venv/bin/python -m app train" in made, made
        text = ".venv/bin/python -m app train"
    argv = shlex.split(APP.sub("", text))
    return argv + tiny(argv)


def tiny(argv: list[str]) -> list[str]:
    word, args = (argv[0], argv[1:]) if argv else ("", [])
    epochs = [int(a.split("=", 1)[1]) for a in args if a.startswith("trainer.epochs=")]
    capped = [f"trainer.epochs={MOST_EPOCHS}"] if epochs and epochs[-1] > MOST_EPOCHS else []
    tiny_words = ("train", "plan", "preview", "bench", "prepare")
    if word not in tiny_words or any(a.startswith(("--", "resume=")) for a in args):
        return capped
    given = {a.split("=", 1)[0] for a in args if "=" in a}
    defaults = {key: value for key, value in TINY_DEFAULTS.items()
                if key not in given and (not key.startswith("data.") or key in DATA_KEYS[source_of(args)])
                and not (key == "model.widths" and "model" in given)}
    if word == "plan":  # the plan's figures are what the page shows: only the data made small
        defaults = {key: value for key, value in defaults.items() if key.startswith("data.")}
    if "trainer.cpu_devices" not in given and "trainer.strategy=mirrored" in args:
        defaults["trainer.cpu_devices"] = "2"
    if "trainer.epochs" not in given and "scheduler=cosine" in args:
        defaults["trainer.epochs"] = "2"  # its one-epoch warm-up needs an epoch after it
    patches = ["data.patches.size=[32,32]"] if any(a.startswith("data.patches.size=") for a in args) else []
    return [f"{key}={value}" for key, value in defaults.items()] + TINY_SIZES.get(word, []) + patches + capped


def source_of(args: list[str]) -> str:
    """The data source a command trains on: its own `data=`, its experiment's, or the default."""
    for arg in args:
        if arg.startswith("data="):
            return arg.split("=", 1)[1]
        if arg.startswith("experiment="):
            preset = (ROOT / "conf" / "experiment" / f"{arg.split('=', 1)[1]}.yaml").read_text()
            if chosen := re.search(r"override /data: (\w+)", preset):
                return chosen.group(1)
    return "synthetic"


def apart(argv: list[str]) -> bool:
    """Runs in a process of its own: the backend or the devices are chosen before they load."""
    return any(arg.startswith(OWN_PROCESS) for arg in argv)


def form(line: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", " ".join(LOG_PREFIX.sub("", line.strip()).split()))


def shows(expected: str, printed: set[str]) -> bool:
    """A documented output line is printed in the same form, numbers aside; a line that explains
    itself in parentheses (the figures behind a choice) up to its first parenthesis."""
    want = form(expected)
    head = want.split("(")[0]
    return want in printed or (len(head) > 15 and any(line.startswith(head) for line in printed))


def write_images(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (folder / name).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), np.uint8)).save(folder / name / f"{i}.jpg")


def write_scans(folder: Path) -> None:
    """A table of scans as docs/data.md shows one: ids without an extension, a patient a few rows."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    rows = ["image_id,label,patient"]
    for i in range(24):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), np.uint8)).save(folder / f"{i:06d}.jpg")
        rows.append(f"{i:06d},{['benign', 'malignant'][i % 2]},p{i // 3}")
    (folder / "train.csv").write_text("\n".join(rows) + "\n")


def write_planet(folder: Path) -> None:
    """A Planet-style table as docs/labels.md shows one: `image_name,tags`, the tags space-separated, some empty."""
    rng = np.random.default_rng(0)
    (folder / "train-jpg").mkdir(parents=True)
    tags = ["clear primary", "cloudy", "", "clear primary road", "haze primary", "clear road"]
    rows = ["image_name,tags"]
    for i in range(24):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), np.uint8)).save(folder / "train-jpg" / f"train_{i}.jpg")
        rows.append(f"train_{i},{tags[i % len(tags)]}")
    (folder / "train_v2.csv").write_text("\n".join(rows) + "\n")


def write_tiles(folder: Path) -> None:
    """Six-band 16-bit tiled TIFFs in class folders, as docs/data.md's scans and aerial tiles."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("field", "water")):
        (folder / name).mkdir(parents=True)
        for i in range(8):
            bands = rng.integers(1000, 1400, (40, 48, 6), dtype=np.uint16) + np.uint16(300 * c)
            tifffile.imwrite(folder / name / f"{i}.tif", bands, photometric="minisblack", planarconfig="contig",
                             tile=(16, 16),
                             compression="lzw")


def write_cifar(folder: Path) -> None:
    """CIFAR-10's python batches, 20 rows each, every class in every batch."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        blob = {b"batch_label": name.encode(), b"labels": [i % 10 for i in range(20)],
                b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * 20}
        (folder / name).write_bytes(pickle.dumps(blob, protocol=2))
    names = [n.encode() for n in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                                  "truck")]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))


def weights_file(home: Path) -> dict:
    """The ImageNet weights file models.md fine-tunes from, here random: the same layers, in the
    same legacy HDF5 format (Keras saves it so only as a whole model, which loads as weights).
    Made by the runner, before the pages' commands, where Keras is loaded anyway."""
    target = home / ".keras" / "models" / "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5"
    target.parent.mkdir(parents=True)
    return {"page": "(the test)", "line": 0, "python": "import keras; keras.applications.MobileNetV3Small("
            f"include_top=False, weights=None, input_shape=(32, 32, 3)).save({str(target)!r})"}


def run_all(commands: list[dict], cwd: Path, env: dict) -> list[dict]:
    tag = f"{commands[0]['page']}-{commands[0]['line']}"
    listed, results = cwd.parent / f"commands-{tag}.json", cwd.parent / f"results-{tag}.json"
    listed.write_text(json.dumps(commands))
    runner = subprocess.run([sys.executable, str(ROOT / "tests" / "docs_runner.py"), str(listed), str(results)],
                            cwd=cwd, env=env, timeout=1200, capture_output=True, text=True)
    done = json.loads(results.read_text()) if results.exists() else []
    if len(done) < len(commands):  # the runner died: what it said, as the next command's result
        done.append({**commands[len(done)], "status": f"runner died ({runner.returncode})",
                     "printed": runner.stdout[-2000:] + runner.stderr[-3000:]})
    return done


def own_directory(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs")
    work, home = tmp / "work", tmp / "home"
    write_images(tmp / "images")
    write_scans(tmp / "scans")
    write_planet(tmp / "planet")
    write_tiles(tmp / "tiles")
    write_texture_folder(tmp / "tissue", train=8, val=4, size=32)  # docs/segmentation.md's
    write_raster_set(tmp / "landcover", n=8, size=32)
    write_annotated_slides(tmp / "annotated", train=2, val=1, side=256, names=["background", "stroma", "tumour"])
    slides = write_slides(tmp / "slides", per_class=2, side=512, classes=("tumour", "normal"))
    (tmp / "slides" / "patches.csv").write_text("path,label,x,y\n" + "".join(  # a table of patches, docs/slides.md's
        f"{path.parent.name}/{path.name},{path.parent.name},{64 * k},{96 * k}\n" for path in slides for k in range(4)))
    write_cifar(work / "datasets" / "cifar10" / "cifar-10-batches-py")
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "tests"),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    together, alone, skipped = [weights_file(home)], [], []
    for command in documented():
        if "python" in command:
            together.append({**command, "python": command["python"].replace("outputs/<date>/<time>", "{LAST_RUN}")})
            continue
        argv = argv_of(command, tmp)
        if argv is None:
            skipped.append(command)
        else:
            (alone if apart(argv) else together).append({**command, "argv": argv})
    jax = [command for command in alone if "trainer.backend=jax" in command["argv"]]
    groups = [[c] for c in alone if c not in jax] + ([jax] if jax else [])  # JAX's share a process: one backend
    with ThreadPoolExecutor(max_workers=1 + len(groups)) as pool:
        in_order = pool.submit(run_all, together, work, env)
        beside = [pool.submit(run_all, group, own_directory(tmp / f"apart-{i}"), env) for i, group in enumerate(groups)]
        results = in_order.result() + [result for ran_apart in beside for result in ran_apart.result()]
    return {"planned": together[1:] + alone, "results": results[1:], "skipped": skipped, "made": results[0],
            "work": work}


@pytest.mark.slow
def test_the_documents_show_commands_and_skip_only_what_needs_a_cluster(ran):
    pages = {c["page"] for c in ran["planned"]}
    assert {"README.md", "models.md", "queue.md", "runs.md", "run-directory.md"} <= pages, pages
    assert len(ran["planned"]) >= 25
    for command in ran["skipped"]:
        reason = next(why for mark, why in SKIPPED.items() if mark in command["text"])
        assert reason, command


@pytest.mark.slow
def test_every_documented_command_runs_as_shown(ran):
    assert ran["made"]["status"] == 0, ran["made"]["printed"]
    failures = []
    for result in ran["results"]:
        where = f"{result['page']}:{result['line']}: {result.get('text') or 'python snippet'}"
        expected = result.get("output", [])
        refused = any(line.startswith("error:") for line in expected)
        if (result["status"] != 0) != refused:
            failures.append(f"{where}: exit status {result['status']}\n{result['printed'][-1500:]}")
            continue
        printed = {form(line) for line in result["printed"].splitlines()}
        missing = [line for line in expected if line not in ("...", "") and not shows(line, printed)]
        if missing:
            failures.append(f"{where}: does not print {missing[:3]}\n{result['printed'][-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert len(ran["results"]) == len(ran["planned"]), "the runner stopped early"


def printed_by(ran, page: str, starts: str) -> str:
    return next(r["printed"] for r in ran["results"] if r["page"] == page and r.get("text", "").startswith(starts))


@pytest.mark.slow
def test_the_readme_sweep_runs_a_job_a_value_each_in_a_fresh_process_and_its_report_is_theirs(ran):
    sweep = max((ran["work"] / "outputs" / "multirun").glob("*/*"), key=lambda path: path.stat().st_mtime)
    summaries = [json.loads((sweep / job / "summary.json").read_text()) for job in ("0", "1")]
    assert not (sweep / "2").exists()
    assert [[o for o in s["overrides"] if o.startswith("queue.max_size")] for s in summaries] == \
           [["queue.max_size=1"], ["queue.max_size=10"]]
    assert {s["status"] for s in summaries} == {"completed"} and {s["isolation"] for s in summaries} == {"clean"}
    assert len({s["pid"] for s in summaries}) == 2  # each job its own process: nothing of one weighs on the next
    rows = list(csv.DictReader((sweep / "report.csv").open()))
    assert [row["queue.max_size"] for row in rows] == ["1", "10"] and "data.num_images" not in rows[0]
    for row, summary in zip(rows, summaries, strict=True):
        for figure in ("images_per_s", "data_wait_fraction", "peak_memory_mb", "val_accuracy"):
            assert float(row[figure]) == pytest.approx(summary[figure])
        assert row["status"] == "completed"
    assert (sweep / "report_queue.max_size.png").read_bytes()[:4] == b"\x89PNG"
    assert "queue.max_size" in printed_by(ran, "README.md", ".venv/bin/python -m app report").splitlines()[0]


@pytest.mark.slow
def test_the_cifar_recipe_under_debug_fast_prints_its_config_and_keeps_its_tags(ran):
    printed = printed_by(ran, "README.md", ".venv/bin/python -m app train experiment=cifar_resnet")
    run = Path(re.search(r"^run dir: (.+)$", printed, re.M).group(1))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tags"] == ["cifar", "resnet"] and summary["steps"] == 2 * summary["epochs_completed"]
    assert json.loads((run / "split.json").read_text())["class_names"][0] == "airplane"
    assert "SGD" in (run / ".hydra" / "config.yaml").read_text()
    tree = printed.splitlines()
    assert f"config of {run}" in tree[0] and "├── trainer" in tree and "└── (top level)" in tree
    assert any(line.endswith("steps_per_epoch: 2") for line in tree) and "- PadIfNeeded" not in printed
    assert any(line.endswith("_target_: albumentations.PadIfNeeded") for line in tree)
