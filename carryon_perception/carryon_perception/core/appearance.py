"""What one segment looks like: a colour descriptor that shading barely changes, and its size.

Colour descriptor (length `DESCRIPTOR_LENGTH`, sums to 1): every pixel is split, by how
chromatic it is (saturation ramping over 0.10..0.25 and value over 0.02..0.05), between a
hue x saturation histogram (12 hue bins of 30 deg; saturation centres 0.25 / 0.55 / 0.85)
and a value histogram (4 bins) for grey, white and black pixels. Shading and light
intensity scale a surface's RGB: that moves its value (V) but keeps hue and saturation, so
V is used only where hue means nothing, and even a deeply shadowed green stays green (the
low value ramp suits rendered and clean images; a noisy camera may want it higher).
Specular highlights lower saturation, which the coarse saturation bins absorb. Binning is
soft (linear between bin centres), so a colour near a bin edge does not flip bins.

Comparison (`colour_cost`): both descriptors normalised and their hue spread over the
neighbouring bins (1/4, 1/2, 1/4), since a channel clipping in a bright highlight shifts
hue by up to a bin (blue turns cyan); then the Hellinger distance (0 = same, 1 = disjoint)
for a whole view, and a palette test for a partial view (it shows only some of the
object's colours: a bottle's shadowed side, a bowl's inside).

Sizes: `height_m` is the 99th percentile of the points' height above the support plane;
`footprint_m` the largest horizontal width of the points over 16 directions (a round
object's diameter, a box's diagonal, whatever its yaw; extremes, not percentiles, which
would cut a box's corners: stray points are the segmenter's to remove). Both metres; None
when unknown (a photo, no depth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IndexArray = npt.NDArray[np.intp]

HUE_BINS = 12
SATURATION_CENTRES = (0.25, 0.55, 0.85)
VALUE_BINS = 4
DESCRIPTOR = f"hs{HUE_BINS}x{len(SATURATION_CENTRES)}+v{VALUE_BINS}"  # names the layout in catalog files
CHROMATIC_BINS = HUE_BINS * len(SATURATION_CENTRES)
DESCRIPTOR_LENGTH = CHROMATIC_BINS + VALUE_BINS
# A pixel is chromatic (its hue means something) above these, ramping linearly in between.
SATURATION_RAMP = (0.10, 0.25)
VALUE_RAMP = (0.02, 0.05)
_DIRECTIONS = 16  # directions over which the footprint width is measured
DECIMALS = 4  # descriptors and sizes are rounded so catalog files round-trip exactly


@dataclass(frozen=True)
class Appearance:
    """One view of an object: `histogram` (DESCRIPTOR_LENGTH,) colour descriptor summing to
    1; `height_m` / `footprint_m` in metres, None when unknown; `pixels`: how many pixels
    it was made from; `partial`: the segment may show only part of its object (cut off by
    the image border, or next to something nearer that hides some of it)."""

    histogram: tuple[float, ...]
    height_m: float | None = None
    footprint_m: float | None = None
    pixels: int = 0
    partial: bool = False

    def __post_init__(self) -> None:
        if len(self.histogram) != DESCRIPTOR_LENGTH:
            raise ValueError(f"histogram has {len(self.histogram)} bins, expected {DESCRIPTOR_LENGTH} ({DESCRIPTOR})")


def describe(
    colors: npt.NDArray[np.uint8], points: FloatArray, support_height_m: float, *, partial: bool = False
) -> Appearance:
    """The appearance of one segment: `colors` (N, 3) uint8 rgb of its pixels, `points`
    (M, 3) its 3-D points in `world` (z up, metres; M may differ from N: pixels without a
    depth return have colour only), `support_height_m` the z (metres) of the plane it
    rests on, `partial` see `Appearance`. Sizes are None without points. ValueError
    when there are no colours."""
    colors = np.asarray(colors, dtype=np.uint8).reshape(-1, 3)
    if len(colors) == 0:
        raise ValueError("describe needs at least one pixel")
    histogram = tuple(round(float(v), DECIMALS) for v in colour_histogram(colors))
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if len(pts) == 0:
        return Appearance(histogram, None, None, len(colors), partial)
    height = max(0.0, float(np.quantile(pts[:, 2], 0.99)) - support_height_m)
    angles = np.arange(_DIRECTIONS) * math.pi / _DIRECTIONS
    widths = pts[:, :2] @ np.stack([np.cos(angles), np.sin(angles)])  # (M, directions)
    footprint = float(np.max(widths.max(axis=0) - widths.min(axis=0)))
    return Appearance(histogram, round(height, DECIMALS), round(footprint, DECIMALS), len(colors), partial)


def colour_histogram(colors: npt.NDArray[np.uint8]) -> FloatArray:
    """The colour descriptor (DESCRIPTOR_LENGTH,) of rgb colours (N, 3) uint8; zeros for N = 0."""
    hue, sat, val = _rgb_to_hsv(colors)
    out = np.zeros(DESCRIPTOR_LENGTH)
    if hue.size == 0:
        return out
    chromatic = _ramp(sat, SATURATION_RAMP) * _ramp(val, VALUE_RAMP)
    n_sat = len(SATURATION_CENTRES)
    h_lo, h_hi, h_w = _soft_bins(hue, (np.arange(HUE_BINS) + 0.5) / HUE_BINS, circular=True)
    s_lo, s_hi, s_w = _soft_bins(sat, np.asarray(SATURATION_CENTRES), circular=False)
    for h_idx, h_wt in ((h_lo, 1.0 - h_w), (h_hi, h_w)):
        for s_idx, s_wt in ((s_lo, 1.0 - s_w), (s_hi, s_w)):
            weights = chromatic * h_wt * s_wt
            out[:CHROMATIC_BINS] += np.bincount(h_idx * n_sat + s_idx, weights=weights, minlength=CHROMATIC_BINS)
    v_lo, v_hi, v_w = _soft_bins(val, (np.arange(VALUE_BINS) + 0.5) / VALUE_BINS, circular=False)
    for v_idx, v_wt in ((v_lo, 1.0 - v_w), (v_hi, v_w)):
        out[CHROMATIC_BINS:] += np.bincount(v_idx, weights=(1.0 - chromatic) * v_wt, minlength=VALUE_BINS)
    return out / hue.size


def comparable(histogram: tuple[float, ...] | FloatArray) -> FloatArray:
    """A descriptor as `colour_cost` compares it: non-negative, summing to 1 (unless all
    zero), hue spread over the neighbouring hue bins (1/4, 1/2, 1/4)."""
    h = np.clip(np.asarray(histogram, dtype=np.float64), 0.0, None)
    total = h.sum()
    h = h / total if total > 0 else h
    hue_sat = h[:CHROMATIC_BINS].reshape(HUE_BINS, len(SATURATION_CENTRES))
    h[:CHROMATIC_BINS] = (
        0.5 * hue_sat + 0.25 * np.roll(hue_sat, 1, axis=0) + 0.25 * np.roll(hue_sat, -1, axis=0)
    ).ravel()
    return h


def colour_cost(segments: FloatArray, references: FloatArray, palette_share: float) -> tuple[FloatArray, FloatArray]:
    """Colour costs (S,) of `comparable` descriptors `segments` (S, D) against one object's
    `references` (R, D), R >= 1, as (whole, partial): whole, the Hellinger distance to the
    nearest reference (0..1); partial, the share of the segment's colours that are not the
    object's colours (0..1), a bin being one of them when it holds `palette_share` of some
    reference (partly, below that)."""
    bc = np.sqrt(segments) @ np.sqrt(references).T
    whole = np.sqrt(np.clip(1.0 - bc, 0.0, 1.0)).min(axis=1)
    palette = np.minimum(1.0, references / palette_share).max(axis=0)
    partial = np.clip(1.0 - segments @ palette, 0.0, 1.0)
    return whole, partial


def photo_region(image: npt.NDArray[np.uint8], *, max_side: int = 256) -> npt.NDArray[np.uint8]:
    """The colours (N, 3) of the object in a reference photo (H, W, 3) uint8 rgb.

    A photo of an entity frames it, roughly centred, against a background that also fills
    the photo's border. So: take the central 60 % x 60 % of the photo and drop its pixels
    whose colour bin is common (>= 5 % of pixels) on the outer border (1/12 of each side);
    if that leaves under 10 % of the centre (object and background look alike), keep the
    whole centre. (The most saturated cluster would be the other choice, but it fails for
    white and grey objects: bowls, plates, blocks.) Larger photos are subsampled to
    `max_side` pixels first. ValueError for anything but an rgb(a) image of 4x4 or more."""
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] not in (3, 4) or min(img.shape[:2]) < 4:
        raise ValueError(f"expected an rgb image (H, W, 3) uint8, got shape {img.shape} {img.dtype}")
    step = max(1, math.ceil(max(img.shape[:2]) / max_side))
    img = img[::step, ::step, :3]
    h, w = img.shape[:2]
    bins = _hard_bins(img.reshape(-1, 3)).reshape(h, w)
    bh, bw = max(1, h // 12), max(1, w // 12)
    border = np.concatenate([bins[:bh].ravel(), bins[-bh:].ravel(), bins[:, :bw].ravel(), bins[:, -bw:].ravel()])
    share = np.bincount(border, minlength=DESCRIPTOR_LENGTH) / border.size
    centre = (slice(round(h * 0.2), round(h * 0.8)), slice(round(w * 0.2), round(w * 0.8)))
    keep = (share[bins[centre]] < 0.05).ravel()
    colours = img[centre].reshape(-1, 3)
    return colours[keep] if keep.sum() >= 0.1 * keep.size else colours


def _rgb_to_hsv(colors: npt.NDArray[np.uint8]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Hue in [0, 1) (turns), saturation and value in [0, 1] of rgb colours (N, 3)."""
    rgb = np.asarray(colors, dtype=np.float64).reshape(-1, 3) / 255.0
    value = rgb.max(axis=1)
    chroma = value - rgb.min(axis=1)
    saturation = np.divide(chroma, value, out=np.zeros_like(value), where=value > 0)
    safe = np.where(chroma > 0, chroma, 1.0)
    r, g, b = rgb.T
    hue = np.where(value == r, (g - b) / safe, np.where(value == g, 2.0 + (b - r) / safe, 4.0 + (r - g) / safe))
    return (hue / 6.0) % 1.0, saturation, value


def _ramp(x: FloatArray, edges: tuple[float, float]) -> FloatArray:
    return np.asarray(np.clip((x - edges[0]) / (edges[1] - edges[0]), 0.0, 1.0), dtype=np.float64)


def _soft_bins(x: FloatArray, centres: FloatArray, *, circular: bool) -> tuple[IndexArray, IndexArray, FloatArray]:
    """Linear interpolation of each x between its two nearest bin `centres`: (low bin,
    high bin, weight of the high bin; the low bin gets 1 minus it). Circular bins (hue)
    wrap around; others clamp at the outermost centres."""
    if circular:
        position = x * len(centres) - 0.5
        low = np.floor(position).astype(np.intp)
        return low % len(centres), (low + 1) % len(centres), position - np.floor(position)
    low = np.clip(np.searchsorted(centres, x) - 1, 0, len(centres) - 2).astype(np.intp)
    weight = np.clip((x - centres[low]) / (centres[low + 1] - centres[low]), 0.0, 1.0)
    return low, low + 1, np.asarray(weight, dtype=np.float64)


def _hard_bins(colors: npt.NDArray[np.uint8]) -> IndexArray:
    """The descriptor bin each colour (N, 3) falls in most (for modelling a photo's background)."""
    hue, sat, val = _rgb_to_hsv(colors)
    chromatic = (_ramp(sat, SATURATION_RAMP) * _ramp(val, VALUE_RAMP)) >= 0.5
    h_idx = np.minimum((hue * HUE_BINS).astype(np.intp), HUE_BINS - 1)
    s_idx = np.argmin(np.abs(sat[:, None] - np.asarray(SATURATION_CENTRES)[None, :]), axis=1)
    v_idx = np.minimum((val * VALUE_BINS).astype(np.intp), VALUE_BINS - 1)
    out: IndexArray = np.where(chromatic, h_idx * len(SATURATION_CENTRES) + s_idx, CHROMATIC_BINS + v_idx)
    return out
