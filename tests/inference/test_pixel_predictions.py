"""app/inference/pixel_predictions.py: predict's masks of a class a pixel, at the input's own size, and their files."""

from __future__ import annotations

import numpy as np
from PIL import Image

from app.inference.pixel_predictions import MaskWriter, at_size, mask_picture


def test_scores_resized_to_the_inputs_size_then_the_likeliest_class():
    scores = np.zeros((2, 2, 3), np.float32)
    scores[0, :, 1] = 1.0  # the top row: class 1; the bottom: class 0
    scores[1, :, 0] = 1.0
    mask = at_size(scores, (4, 6))
    assert mask.shape == (4, 6) and set(np.unique(mask[0])) == {1} and set(np.unique(mask[-1])) == {0}
    assert np.array_equal(at_size(scores, (2, 2)), scores.argmax(axis=-1))  # its own size: the argmax as it is


def test_a_mask_is_a_palette_png_of_indices_or_16_bit_past_256_classes(tmp_path):
    mask = np.array([[0, 1], [2, 1]])
    mask_picture(mask, 3).save(tmp_path / "m.png")
    read = Image.open(tmp_path / "m.png")
    assert read.mode == "P" and np.array_equal(np.asarray(read), mask)  # the indices, whatever the colours
    assert read.getpalette()[3:6] != [1, 1, 1]  # negative control: coloured, not grey indices
    wide = np.array([[0, 300], [299, 1]])
    mask_picture(wide, 301).save(tmp_path / "w.png")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "w.png")), wide)


def test_each_input_keeps_its_own_files_when_two_share_a_stem(tmp_path):
    (tmp_path / "in").mkdir()  # the input folder predict was given
    writer = MaskWriter(tmp_path / "out", ["a", "b"], tmp_path / "in")
    image, scores = np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 2), np.float32)
    scores[..., 1] = 1.0
    first, shares = writer.write(str(tmp_path / "in" / "x" / "a.jpg"), image, scores)
    second, _ = writer.write(str(tmp_path / "in" / "x" / "a.png"), image, scores)
    assert (first, second) == ("masks/x/a.png", "masks/x/a.png.png") and shares.tolist() == [0.0, 1.0]
    assert (tmp_path / "out" / "overlays" / "x" / "a.png").is_file()
    assert (tmp_path / "out" / "overlays" / "x" / "a.png.png").is_file()
    other, _ = writer.write(str(tmp_path / "in" / "y" / "a.jpg"), image, scores)
    assert other == "masks/y/a.png"  # negative control: another folder's a.jpg takes its plain name
