"""Object segments from one organised RGB-D image: what stands on a support, split where
depth jumps or colour changes, so touching objects separate (a carrot in a bowl, meat on a
plate) while one object's shading does not split it.

The image is a graph: candidate pixels (valid depth, not the robot, above a support) are
nodes; two 4-neighbours are joined when their depths agree (`depth_jump_m` + a share of the
depth) and their chromaticity agrees (`chroma_edge`; brightness is left out, so a shadow
is not an edge). Connected components are the first segments; adjacent segments whose mean
colours agree are merged (shading gradients), and fragments under `min_pixels` join the
neighbour they share the longest depth-continuous border with. No candidate pixel is ever
dropped: for the shield, a point left out would be an obstacle missed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from carryon_perception.core.types import FloatArray

BoolImage = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True)
class SegmentParams:
    depth_jump_m: float = 0.01  # neighbours further apart in depth are not one surface...
    depth_jump_share: float = 0.015  # ...plus this share of their depth (noise grows with range)
    chroma_edge: float = 0.045  # chromaticity (r, g of rgb / sum) distance that cuts two neighbours
    dark: float = 20.0  # mean rgb under which chromaticity is noise: no colour edge between two such pixels
    merge_hue_deg: float = 40.0  # adjacent chromatic segments with mean hues this close merge (a channel
    # clipping in a highlight turns a hue by up to ~30 deg: pink reads magenta)
    chromatic_saturation: float = 0.2  # a pixel is chromatic (its hue means something) above this...
    tint_saturation: float = 0.08  # a light piece this saturated is a highlight: it may join a chromatic one
    chromatic_value: float = 0.12  # ...and this brightness (a segment darker on average is "dark")
    min_pixels: int = 12  # smaller fragments join a neighbour (at 256 x 256; scale with area)
    dark_gap_m: float = 0.03  # pieces this close in 3-D may merge across a depth step (a grazing face, a rim)
    gap_pixels: float = 3.0  # ... plus this many pixels' footprint at their range
    isolated_join_m: float = 0.03  # a small fragment touching no segment joins the nearest within this


@dataclass(frozen=True)
class Segment:
    """One segment of one camera: flat pixel indices (N,) into the image (row * W + col),
    their world points (N, 3) and rgb colours (N, 3) uint8."""

    pixels: IntArray
    points: FloatArray
    colors: npt.NDArray[np.uint8]
    partial: bool = False  # may show only part of its object (image border, or hidden behind something)


def mark_partial(
    segments: list[Segment], depth: npt.NDArray[np.floating], occluder: BoolImage, step_m: float = 0.02
) -> list[Segment]:
    """The segments with `partial` set where one touches the image border, an `occluder`
    pixel (the robot) or a pixel of something else at least `step_m` nearer the camera."""
    height, width = occluder.shape
    owner = np.full(height * width, -1, dtype=np.intp)
    for k, segment in enumerate(segments):
        owner[segment.pixels] = k
    owner_img = owner.reshape(height, width)
    z = np.where(np.isfinite(depth) & (depth > 0), depth, np.inf).astype(np.float64)
    hit = np.zeros(len(segments), dtype=bool)
    edge = np.zeros((height, width), dtype=bool)
    edge[[0, -1], :] = True
    edge[:, [0, -1]] = True
    hit[np.unique(owner_img[edge & (owner_img >= 0)])] = True
    for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)):
        rows = slice(max(dr, 0), height + min(dr, 0))
        cols = slice(max(dc, 0), width + min(dc, 0))
        here = (slice(max(-dr, 0), height + min(-dr, 0)), slice(max(-dc, 0), width + min(-dc, 0)))
        me, other = owner_img[here], owner_img[rows, cols]
        nearer = occluder[rows, cols] | (z[rows, cols] < z[here] - step_m)
        flagged = (me >= 0) & (other != me) & nearer
        hit[np.unique(me[flagged])] = True
    return [replace(s, partial=bool(hit[k])) for k, s in enumerate(segments)]


def chromaticity(rgb: npt.NDArray[np.uint8]) -> tuple[FloatArray, FloatArray]:
    """(r, g) of rgb / (r + g + b) as (..., 2), and the mean brightness (...), 0..255."""
    values = rgb.astype(np.float64)
    total = values.sum(axis=-1)
    chroma = values[..., :2] / np.maximum(total, 1.0)[..., None]
    return chroma, total / 3.0


def segment_image(
    rgb: npt.NDArray[np.uint8],
    depth: npt.NDArray[np.floating],
    points: FloatArray,
    candidate: BoolImage,
    params: SegmentParams | None = None,
    *,
    focal_px: float | None = None,
) -> list[Segment]:
    """Segments of the `candidate` pixels. rgb (H, W, 3); depth (H, W) metres; points
    (H, W, 3) world metres for every pixel (garbage where not candidate); candidate (H, W);
    `focal_px` the focal length in pixels (scales the 3-D gaps allowed with the pixel size)."""
    params = params or SegmentParams()
    height, width = candidate.shape
    chroma, brightness = chromaticity(rgb)
    z = np.asarray(depth, dtype=np.float64)
    index = np.full(height * width, -1, dtype=np.intp)
    flat_candidates = np.flatnonzero(candidate)
    index[flat_candidates] = np.arange(len(flat_candidates))
    if len(flat_candidates) == 0:
        return []

    sources, targets, continuous = [], [], []
    for dr, dc in ((0, 1), (1, 0)):
        a = candidate[: height - dr, : width - dc] & candidate[dr:, dc:]
        za, zb = z[: height - dr, : width - dc], z[dr:, dc:]
        depth_ok = np.abs(za - zb) <= params.depth_jump_m + params.depth_jump_share * np.minimum(za, zb)
        ca, cb = chroma[: height - dr, : width - dc], chroma[dr:, dc:]
        dark = (brightness[: height - dr, : width - dc] < params.dark) & (brightness[dr:, dc:] < params.dark)
        colour_ok = (np.linalg.norm(ca - cb, axis=-1) <= params.chroma_edge) | dark
        rows, cols = np.nonzero(a)
        pa = index[rows * width + cols]
        pb = index[(rows + dr) * width + cols + dc]
        sources.append(pa)
        targets.append(pb)
        continuous.append(np.stack([depth_ok[rows, cols], colour_ok[rows, cols]], axis=1))
    pa, pb = np.concatenate(sources), np.concatenate(targets)
    ok = np.concatenate(continuous)
    joined = ok[:, 0] & ok[:, 1]
    n = len(flat_candidates)
    component = _components(n, pa[joined], pb[joined])

    # Borders between components that are depth-continuous: where merges may happen.
    border = ok[:, 0] & (component[pa] != component[pb])
    pixel_rgb = rgb.reshape(-1, 3)[flat_candidates].astype(np.float64)
    world_all = points.reshape(-1, 3)[flat_candidates]
    gap_limit = params.dark_gap_m
    if focal_px:
        # plus a few pixels' footprint at that range: a coarse image steps further per pixel
        gap_limit = gap_limit + params.gap_pixels * np.minimum(z.reshape(-1)[flat_candidates[pa]], 5.0) / focal_px
    near = np.linalg.norm(world_all[pa] - world_all[pb], axis=1) <= gap_limit
    component = _merge_similar(component, (pa[border], pb[border]), (pa[near], pb[near]), pixel_rgb, params)
    border = ok[:, 0] & (component[pa] != component[pb])
    component = _absorb_fragments(component, pa[border], pb[border], params.min_pixels)
    anywhere = component[pa] != component[pb]  # then across depth steps too (silhouette pixels)
    component = _absorb_fragments(component, pa[anywhere], pb[anywhere], params.min_pixels)
    component = _join_isolated(component, world_all, params.min_pixels, params.isolated_join_m)

    world = points.reshape(-1, 3)
    colours = rgb.reshape(-1, 3)
    out = []
    order = np.argsort(component, kind="stable")
    splits = np.flatnonzero(np.diff(component[order])) + 1
    for members in np.split(order, splits):
        pixels = flat_candidates[members]
        out.append(Segment(pixels=pixels, points=world[pixels], colors=colours[pixels]))
    return out


def _components(n: int, a: IntArray, b: IntArray) -> IntArray:
    graph = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    out: IntArray = labels.astype(np.intp)
    return out


def _hsv(rgb: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Hue (radians), saturation and value (0..1) of rgb (N, 3) in 0..255."""
    values = rgb / 255.0
    high, low = values.max(axis=1), values.min(axis=1)
    spread = high - low
    saturation = np.where(high > 0, spread / np.maximum(high, 1e-9), 0.0)
    r, g, b = values[:, 0], values[:, 1], values[:, 2]
    safe = np.maximum(spread, 1e-9)
    hue = np.where(high == r, (g - b) / safe, np.where(high == g, 2.0 + (b - r) / safe, 4.0 + (r - g) / safe))
    return hue * (np.pi / 3.0), saturation, high


def _merge_similar(
    component: IntArray,
    continuous: tuple[IntArray, IntArray],
    near: tuple[IntArray, IntArray],
    rgb: FloatArray,
    params: SegmentParams,
) -> IntArray:
    """Merge adjacent components that are one surface in other light. Each component is
    chromatic (its hue means something), light-colourless (white, grey) or dark.
    Over depth-continuous borders (`continuous`: pixel pairs): two chromatic ones with mean
    hues within `merge_hue_deg` merge (a shadowed side, a clipped highlight keep roughly
    their hue), two light ones merge (a bowl's lit inside and shaded outside). Dark ones (a
    face in shadow, often seen at a grazing angle where depth steps between pixel columns:
    `near`, pairs within `dark_gap_m` in 3-D) first join each other, then the group joins
    ONE neighbour, the chromatic one it shares the longest border with, else the light one:
    joining one only, it never bridges meat and the plate it lies on."""
    count = int(component.max()) + 1
    hue, saturation, value = _hsv(rgb)
    component = _join_pairs(component, count, *_dark_pairs(component, near, value, params, count))
    stats = _ComponentColour.of(component, hue, saturation, value, params)
    joined = []
    # same-colour merges also across small 3-D gaps: a bowl's inside seen over its front rim
    ca = np.concatenate([component[continuous[0]], component[near[0]]])
    cb = np.concatenate([component[continuous[1]], component[near[1]]])
    turn = np.abs(np.angle(np.exp(1j * (stats.hue[ca] - stats.hue[cb]))))
    hued = stats.chromatic | stats.tinted
    same_hue = (
        hued[ca] & hued[cb] & (stats.chromatic[ca] | stats.chromatic[cb]) & (turn <= np.radians(params.merge_hue_deg))
    )
    joined.append(np.stack([ca, cb], axis=1)[same_hue | (stats.light[ca] & stats.light[cb])])
    # each dark group: its one best non-dark neighbour
    na, nb = component[near[0]], component[near[1]]
    both = np.concatenate([np.stack([na, nb], axis=1), np.stack([nb, na], axis=1)])
    both = both[stats.dark[both[:, 0]] & ~stats.dark[both[:, 1]]]
    if len(both):
        keys, lengths = np.unique(both, axis=0, return_counts=True)
        order = np.lexsort((-lengths, ~stats.chromatic[keys[:, 1]], keys[:, 0]))
        keys = keys[order]
        first = np.concatenate([[True], keys[1:, 0] != keys[:-1, 0]])
        joined.append(keys[first])
    pairs = np.concatenate(joined)
    return _join_pairs(component, count, pairs[:, 0], pairs[:, 1])


@dataclass(frozen=True)
class _ComponentColour:
    hue: FloatArray  # mean hue per component, radians (saturation-weighted direction)
    dark: npt.NDArray[np.bool_]
    chromatic: npt.NDArray[np.bool_]
    light: npt.NDArray[np.bool_]
    tinted: npt.NDArray[np.bool_]  # light but faintly coloured: a coloured surface's highlight

    @classmethod
    def of(
        cls, component: IntArray, hue: FloatArray, saturation: FloatArray, value: FloatArray, params: SegmentParams
    ) -> _ComponentColour:
        count = int(component.max()) + 1
        sizes = np.maximum(np.bincount(component, minlength=count), 1).astype(np.float64)
        hx = np.bincount(component, weights=saturation * np.cos(hue), minlength=count)
        hy = np.bincount(component, weights=saturation * np.sin(hue), minlength=count)
        dark = np.bincount(component, weights=value, minlength=count) / sizes < params.chromatic_value
        coloured = ((saturation >= params.chromatic_saturation) & (value >= params.chromatic_value)).astype(float)
        chromatic = ~dark & (np.bincount(component, weights=coloured, minlength=count) / sizes >= 0.5)
        light = ~dark & ~chromatic
        mean_saturation = np.bincount(component, weights=saturation, minlength=count) / sizes
        tinted = light & (mean_saturation >= params.tint_saturation)
        return cls(np.arctan2(hy, hx), dark, chromatic, light, tinted)


def _dark_pairs(
    component: IntArray, near: tuple[IntArray, IntArray], value: FloatArray, params: SegmentParams, count: int
) -> tuple[IntArray, IntArray]:
    sizes = np.maximum(np.bincount(component, minlength=count), 1).astype(np.float64)
    dark = np.bincount(component, weights=value, minlength=count) / sizes < params.chromatic_value
    a, b = component[near[0]], component[near[1]]
    keep = dark[a] & dark[b] & (a != b)
    return a[keep], b[keep]


def _join_pairs(component: IntArray, count: int, a: IntArray, b: IntArray) -> IntArray:
    if len(a) == 0:
        return component
    return _components(count, a, b)[component]


def _absorb_fragments(component: IntArray, a: IntArray, b: IntArray, min_pixels: int) -> IntArray:
    """Each component under `min_pixels` joins the neighbour it shares the longest border with."""
    count = int(component.max()) + 1
    sizes = np.bincount(component, minlength=count)
    ca, cb = component[a], component[b]
    pairs = np.concatenate([np.stack([ca, cb], axis=1), np.stack([cb, ca], axis=1)])
    pairs = pairs[(pairs[:, 0] != pairs[:, 1]) & (sizes[pairs[:, 0]] < min_pixels)]
    if len(pairs) == 0:
        return component
    keys, lengths = np.unique(pairs, axis=0, return_counts=True)
    # longest border first per small component; ties to the larger neighbour
    order = np.lexsort((-sizes[keys[:, 1]], -lengths, keys[:, 0]))
    keys = keys[order]
    first = np.concatenate([[True], keys[1:, 0] != keys[:-1, 0]])
    chosen = keys[first]
    return _components(count, chosen[:, 0], chosen[:, 1])[component]


def _join_isolated(component: IntArray, points: FloatArray, min_pixels: int, within_m: float) -> IntArray:
    """Fragments under `min_pixels` that still stand alone join the segment with the nearest
    point within `within_m` (metres); farther ones stay (a small object of their own)."""
    count = int(component.max()) + 1
    sizes = np.bincount(component, minlength=count)
    small = sizes < min_pixels
    if not small.any() or small.all():
        return component
    big_points = ~small[component]
    tree = cKDTree(points[big_points])
    distance, nearest_raw = tree.query(points[~big_points], distance_upper_bound=within_m)
    nearest = np.asarray(nearest_raw, dtype=np.intp)
    found = np.isfinite(distance)
    if not found.any():
        return component
    out = component.copy()
    small_members = np.flatnonzero(~big_points)
    target = component[np.flatnonzero(big_points)[nearest[found]]]
    # a whole fragment goes where most of its pixels point
    fragment = component[small_members[found]]
    for frag in np.unique(fragment):
        votes = target[fragment == frag]
        out[component == frag] = np.bincount(votes).argmax()
    return out
