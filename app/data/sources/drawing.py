"""One synthetic image: a class shape in a jittered class colour, soft-edged and semi-transparent, placed at random
among clutter, over uneven light, with texture and sensor noise as a photograph has; a few sizes and aspect ratios."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

ASPECTS = ((1, 1), (4, 3), (3, 2), (16, 9))  # long side : short side
SCALES = (0.8, 1.0, 1.2)  # an image's pixels, as the side of a square of as many, over data.source_size
TEXTURE_OCTAVES = ((8, 14.0), (32, 7.0), (128, 4.0))  # (noise cells on the long side, amplitude in levels)
SENSOR_NOISE = 2.0  # standard deviation in levels, of brightness
CHROMA_SHARE = 0.15  # colour mottle, as a share of the brightness grain: cameras smooth colour most
SHAPES = ("circle", "square", "triangle", "cross", "stripes", "ring", "star", "crescent")
COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (40, 80, 230),
           "yellow": (235, 215, 40), "magenta": (210, 50, 200), "cyan": (40, 210, 215)}


def class_style(label: int) -> tuple[str, str]:
    """(shape, colour) of class `label`: colours shift by one each round of SHAPES, so no pair repeats below 48."""
    shape, round_ = label % len(SHAPES), label // len(SHAPES)
    colours = list(COLOURS)
    return SHAPES[shape], colours[(shape + round_) % len(colours)]


def image_size(rng: np.random.Generator, source_size: int) -> tuple[int, int]:
    """(width, height): the area of a square of side `source_size` × one of SCALES, in one of ASPECTS, either way up."""
    side = source_size * SCALES[int(rng.integers(len(SCALES)))]
    a, b = ASPECTS[int(rng.integers(len(ASPECTS)))]
    long_side, short_side = round(side * np.sqrt(a / b)), max(8, round(side * np.sqrt(b / a)))
    return (long_side, short_side) if rng.random() < 0.5 else (short_side, long_side)


def draw_image(rng: np.random.Generator, source_size: int, label: int) -> Image.Image:
    """One RGB image of class `label` as a viewer shows it (EXIF orientation applied)."""
    width, height = image_size(rng, source_size)
    img = _background(rng, width, height)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(10, 20))):  # clutter
        _clutter(draw, rng, width, height)
    shape, colour_name = class_style(label)
    colour = np.clip(np.array(COLOURS[colour_name]) + rng.integers(-30, 31, 3), 0, 255)
    mask = Image.new("L", (width, height), 0)
    _shape(ImageDraw.Draw(mask), rng, min(width, height), shape)
    mask = mask.filter(ImageFilter.GaussianBlur(min(width, height) / 300))  # a soft edge, as out of focus
    alpha = np.asarray(mask, dtype=np.float32)[..., None] * (rng.uniform(0.7, 0.95) / 255)
    pixels = np.asarray(img, dtype=np.float32) * (1 - alpha) + colour.astype(np.float32) * alpha
    pixels += _texture(rng, width, height)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _background(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Light falling unevenly over colour fields."""
    return Image.fromarray(rng.integers(40, 216, (3, 3, 3), dtype=np.uint8)).resize(
        (width, height), Image.Resampling.BICUBIC)


def _texture(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """Photo-like grain at several scales, sensor noise and a faint colour mottle: (height, width, 3) levels to add."""
    grey = rng.standard_normal((height, width), dtype=np.float32)
    grey *= SENSOR_NOISE
    for cells_per_side, amplitude in TEXTURE_OCTAVES:
        layer = _noise_layer(rng, (width, height), cells_per_side, "L")
        layer -= 127.5
        layer *= amplitude / 127.5
        grey += layer
    colour = _noise_layer(rng, (width, height), TEXTURE_OCTAVES[1][0], "RGB")
    colour -= 127.5
    colour *= CHROMA_SHARE * TEXTURE_OCTAVES[1][1] / 127.5
    colour += grey[..., None]
    return colour


def _noise_layer(rng: np.random.Generator, size: tuple[int, int], cells_per_side: int, mode: str) -> np.ndarray:
    """Uniform noise on `cells_per_side` cells along the long side, bicubically upscaled to `size` (width, height)."""
    width, height = size
    long_side = max(width, height)
    side = max(2, min(cells_per_side, long_side // 2))
    shape = (max(2, side * height // long_side), max(2, side * width // long_side)) + ((3,) if mode == "RGB" else ())
    grid = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8))  # 2-D: greyscale, else RGB
    return np.asarray(grid.resize((width, height), Image.Resampling.BICUBIC), np.float32)


def _clutter(draw: ImageDraw.ImageDraw, rng: np.random.Generator, width: int, height: int) -> None:
    palette = list(COLOURS.values())
    # A fifth in the classes' colours, so colour alone is a weak cue
    base = np.array(palette[int(rng.integers(len(palette)))] if rng.random() < 0.2 else rng.integers(0, 256, 3))
    colour = tuple(int(v) for v in np.clip(base + rng.integers(-40, 41, 3), 0, 255))
    x, y = rng.uniform(0, width), rng.uniform(0, height)
    r = min(width, height) * rng.uniform(0.03, 0.1)
    kind = rng.integers(3)
    if kind == 0:
        draw.ellipse((x - r, y - r * rng.uniform(0.4, 1), x + r, y + r), fill=colour)
    elif kind == 1:
        draw.rectangle((x - r, y - r / 2, x + r, y + r / 2), fill=colour)
    else:
        x2, y2 = rng.uniform(0, width), rng.uniform(0, height)
        draw.line((x, y, x2, y2), fill=colour, width=max(1, min(width, height) // 80))


def _shape(draw: ImageDraw.ImageDraw, rng: np.random.Generator, size: int, shape: str) -> None:
    """Draw `shape` in white on a mask, radius 16–28% of the short side `size`, wholly inside the image."""
    r = size * rng.uniform(0.16, 0.28)
    width, height = draw.im.size
    cx, cy = rng.uniform(r, width - r), rng.uniform(r, height - r)
    angle = rng.uniform(0, 2 * np.pi)

    def poly(points) -> list[tuple[float, float]]:
        # Unit-radius points → rotated, scaled and moved into place.
        p = np.asarray(points, dtype=float)
        c, s = np.cos(angle), np.sin(angle)
        xy = p @ np.array([[c, s], [-s, c]]) * r + (cx, cy)
        return [tuple(v) for v in xy]

    def disc(x: float, y: float, radius: float, fill: int) -> None:
        draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=fill)

    if shape == "circle":
        disc(cx, cy, r, 255)
    elif shape == "ring":
        disc(cx, cy, r, 255)
        disc(cx, cy, r * 0.6, 0)
    elif shape == "crescent":
        disc(cx, cy, r, 255)
        dx, dy = np.cos(angle) * r * 0.45, np.sin(angle) * r * 0.45
        disc(cx + dx, cy + dy, r * 0.8, 0)
    elif shape == "square":
        draw.polygon(poly([(-0.75, -0.75), (0.75, -0.75), (0.75, 0.75), (-0.75, 0.75)]), fill=255)
    elif shape == "triangle":
        t = np.array([np.pi / 2, np.pi / 2 + 2 * np.pi / 3, np.pi / 2 + 4 * np.pi / 3])
        draw.polygon(poly(np.stack([np.cos(t), np.sin(t)], axis=1)), fill=255)
    elif shape == "cross":
        a, b = 1.0, 0.28
        draw.polygon(poly([(-a, -b), (a, -b), (a, b), (-a, b)]), fill=255)
        draw.polygon(poly([(-b, -a), (b, -a), (b, a), (-b, a)]), fill=255)
    elif shape == "stripes":
        for offset in (-0.8, -0.2, 0.4):
            draw.polygon(poly([(-0.9, offset), (0.9, offset), (0.9, offset + 0.35),
                               (-0.9, offset + 0.35)]), fill=255)
    elif shape == "star":
        t = np.pi / 2 + np.arange(10) * np.pi / 5
        radius = np.where(np.arange(10) % 2 == 0, 1.0, 0.42)
        draw.polygon(poly(np.stack([np.cos(t) * radius, np.sin(t) * radius], axis=1)), fill=255)
