"""Slides as a hostile user brings them, through the real CLI: a slide that is tissue from edge to edge trains and
predicts on its whole grid while a blank glass slide is left out, named on the console; predict over slides of one
name in two folders, a name with a comma and a quote, a slide cut short, one whose patches' tiles are damaged and a
JPEG without the level asked gives a row each (the unreadable ones with why), heatmaps a file each, whole CSV rows.
The train and the predict run in one process (tests/docs_runner.py): TensorFlow loads once."""

import csv
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from docs_runner import spawn_one_process_for
from PIL import Image
from slides import GLASS, he_pixels, slide_pixels, tiles_of, write_slide, zero_tiles

TESTS = Path(__file__).resolve().parents[1]
SIDE, GRID = 256, 16  # a slide's side, and its grid of 32² patches at level 1 (64² at level 0)
DATA = ["data=folder", "data.path=slides", "data.patches.size=[32,32]", "data.patches.level=1",
        "data.patches.per_image=4", "data.image_size=[32,32]", "data.val_fraction=0.5", "data.batch_size=4",
        "model.widths=[8]", "augment=none", "trainer.epochs=1", "queue.workers=1", "hydra.run.dir=run"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """One training run on H&E-like slides, blobs on glass and a blank glass slide; one predict over hostile files."""
    root = tmp_path_factory.mktemp("slides")
    rng = np.random.default_rng(0)
    for name in ("he", "blob"):
        (root / "slides" / name).mkdir(parents=True)
        for i in range(2):
            image = he_pixels(SIDE, rng) if name == "he" else slide_pixels(SIDE, 1, rng)[0]
            write_slide(root / "slides" / name / f"{i}.tif", image, levels=3, tile=64)
    write_slide(root / "slides" / "he" / "glass.tif", np.full((SIDE, SIDE, 3), GLASS, np.uint8), levels=3, tile=64)
    given = root / "given"
    for name, image in (("a/slide.tif", he_pixels(SIDE, rng)), ("b/slide.tif", slide_pixels(SIDE, 1, rng)[0]),
                        ('we,ird "name".tif', slide_pixels(SIDE, 1, rng)[0]), ("cut.tif", he_pixels(SIDE, rng)),
                        ("damaged.tif", he_pixels(SIDE, rng))):
        (given / name).parent.mkdir(parents=True, exist_ok=True)
        write_slide(given / name, image, levels=3, tile=64)
    (last, _), = tiles_of(given / "cut.tif", slice(2, 3))  # cut short where the last level's tile begins
    (given / "cut.tif").write_bytes((given / "cut.tif").read_bytes()[:last])
    zero_tiles(given / "damaged.tif", slice(1, 2))  # level 1, the patches': the mask (level 2) reads
    Image.fromarray(he_pixels(SIDE, rng)).save(given / "photo.jpg")  # one level: no level 1
    trained, predicted = spawn_one_process_for(["train", *DATA], ["predict", "resume=run", f"input={given}"], cwd=root,
                                               env={**os.environ, "PYTHONPATH": str(TESTS)})
    return root, trained, predicted


@pytest.mark.slow
def test_tissue_from_edge_to_edge_trains_and_glass_is_left_out_by_name(made):
    root, trained, _ = made
    assert trained.returncode == 0, trained.stderr[-3000:]
    glass = str(root / "slides" / "he" / "glass.tif")
    warned = [line for line in trained.stdout.splitlines() if "left out" in line]  # stdout and stderr, as one
    assert len(warned) == 1 and glass in warned[0] and "min_foreground" in warned[0]
    assert "0.tif" not in warned[0] and "1.tif" not in warned[0]  # the tissue slides are not


@pytest.mark.slow
def test_predict_gives_a_row_a_file_heatmaps_of_their_own_and_whole_csv_rows(made):
    root, _, predicted = made
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert "Traceback" not in predicted.stderr and "3 without any, listed with why" in predicted.stdout
    (out,) = (root / "run" / "predict").glob("*")
    with (out / "predictions.csv").open(encoding="utf-8", newline="") as f:
        rows = {str(Path(row["path"]).relative_to(root / "given")): row for row in csv.DictReader(f)}
    assert set(rows) == {"a/slide.tif", "b/slide.tif", 'we,ird "name".tif', "cut.tif", "damaged.tif", "photo.jpg"}
    for name in ("cut.tif", "damaged.tif", "photo.jpg"):  # a row with why, no numbers
        assert rows[name]["class"] == "" and rows[name]["patches"] == "0" and rows[name]["error"], rows[name]
    assert "cannot be read as patches: its level 2 cannot be read" in rows["cut.tif"]["error"]
    assert "no patch of it could be read" in rows["damaged.tif"]["error"]
    assert "data.patches.level=1" in rows["photo.jpg"]["error"] and "levels 0 to 0" in rows["photo.jpg"]["error"]
    assert int(rows["a/slide.tif"]["patches"]) == GRID  # tissue from edge to edge: every patch
    assert 0 < int(rows["b/slide.tif"]["patches"]) < GRID  # negative control: a blob on glass, part of it
    heatmaps = {rows[name]["heatmap"] for name in ("a/slide.tif", "b/slide.tif", 'we,ird "name".tif')}
    assert len(heatmaps) == 3 and all(Path(p).is_file() and Path(p).with_suffix(".heat.png").is_file()
                                      for p in heatmaps)
    with (out / "patches.csv").open(encoding="utf-8", newline="") as f:
        header, *lines = list(csv.reader(f))
    assert {len(line) for line in lines} == {len(header)}
    assert {line[0] for line in lines} == {str(root / "given" / n) for n in ("a/slide.tif", "b/slide.tif",
                                                                               'we,ird "name".tif')}
