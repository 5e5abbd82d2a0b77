"""The object catalog: what each known object looks like, and labelling segments with it.

A `CatalogEntry` holds reference `Appearance`s of one object (`core/appearance.py`: colour
descriptor, height, footprint) from several views: the scene camera, close wrist-like
views, user photos. `Catalog.label` names the segments of one frame jointly (Hungarian
assignment), so a catalog name labels at most one segment, and a segment that matches
nothing well enough stays unlabelled (the caller names it `unknown_<n>`).

Cost of segment s against entry e (`LabelCosts`; unitless, lower is better):
  colour(s, e) + size(s.height, e.height) + size(s.footprint, e.footprint)
colour: the Hellinger distance to e's nearest reference; for a segment marked partial and
clearly smaller than e, at most `partial_view_cost` + the share of its colours that are not
e's colours. size: with r = (segment + slack) / (entry + slack), free within tolerances,
then cheap below (occlusion and the image border make segments smaller) and steep above
(nothing makes an object look bigger than it is). Sizes that are unknown cost nothing.

Catalog files (YAML; `Catalog.load` / `save`): `objects` maps names to `types`, which hold
the references and nominal sizes once; entries of one type look identical.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.optimize import linear_sum_assignment

from carryon_common.core.config import load_yaml_model
from carryon_common.core.errors import UnknownNameError
from carryon_common.core.registry import unknown_name_message
from carryon_perception.core.appearance import (
    DESCRIPTOR,
    DESCRIPTOR_LENGTH,
    Appearance,
    colour_cost,
    comparable,
    describe,
    photo_region,
)

__all__ = ["Appearance", "Catalog", "CatalogEntry", "LabelCosts", "Match", "describe"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CatalogEntry:
    """A known object: `name` as scenes and memory call it; `type`: entries of one type
    look identical and share their references; reference appearances from several views;
    nominal `height_m` / `footprint_m` (metres; None when unknown, e.g. photos only)."""

    name: str
    type: str
    references: tuple[Appearance, ...]
    height_m: float | None = None
    footprint_m: float | None = None


@dataclass(frozen=True)
class Match:
    """The label of one segment: a catalog name or None (unknown); `score` 0..1 (1 = a
    perfect match, 0 = at the threshold or unlabelled); the `cost` behind it (for an
    unlabelled segment its lowest cost over the candidates, inf when there were none)."""

    label: str | None
    score: float
    cost: float


@dataclass(frozen=True)
class LabelCosts:
    """How a segment's cost against an entry is made (module docstring); all unitless
    except `size_slack_m`. r = (segment size + slack) / (entry size + slack)."""

    max_cost: float = 0.5  # above this a segment stays unlabelled
    size_slack_m: float = 0.01  # added to both sizes: depth noise on small objects, metres
    oversize_tolerance: float = 0.3  # r up to 1 + this is free
    oversize_weight: float = 2.5  # cost per unit of log(r) beyond that
    undersize_tolerance: float = 0.2  # r down to 1 / (1 + this) is free
    undersize_weight: float = 0.1  # cost per unit of -log(r) beyond that
    partial_view_cost: float = 0.25  # least colour cost of a partial view matched by palette
    palette_share: float = 0.02  # a bin holding this share of a reference is one of the object's colours
    partial_size_ratio: float = 0.75  # a partial view needs r at or below this in height or footprint


DEFAULT_COSTS = LabelCosts()


@dataclass(frozen=True)
class Catalog:
    """Entries by name. Entries of one type must have equal references and sizes."""

    entries: Mapping[str, CatalogEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        by_type: dict[str, CatalogEntry] = {}
        for name, entry in self.entries.items():
            if name != entry.name:
                raise ValueError(f"catalog key {name!r} holds entry {entry.name!r}")
            first = by_type.setdefault(entry.type, entry)
            if (first.references, first.height_m, first.footprint_m) != (
                entry.references,
                entry.height_m,
                entry.footprint_m,
            ):
                raise ValueError(f"entries {first.name!r} and {name!r} share type {entry.type!r} but differ")

    def entry(self, name: str) -> CatalogEntry:
        """The entry called `name`; UnknownNameError lists the names and the closest one."""
        if name not in self.entries:
            raise UnknownNameError(unknown_name_message("catalog entry", name, self.entries))
        return self.entries[name]

    def with_reference_images(self, name: str, images: Sequence[npt.NDArray[np.uint8]]) -> Catalog:
        """A catalog where entity `name` gains one colour-only reference per photo (H, W, 3)
        uint8 rgb, made from the photo's object region (`appearance.photo_region`). Every
        entry of its type gains them too (they look the same). An unknown name becomes a
        new entry of a type of its own, size unknown. ValueError for a malformed image."""
        refs = tuple(replace(describe(photo_region(img), np.empty((0, 3)), 0.0), pixels=0) for img in images)
        target = self.entries.get(name)
        if target is None:
            type_name, used = name, {e.type for e in self.entries.values()}
            while type_name in used:  # a new entity never joins the look of existing ones
                type_name += "_photo"
            target = CatalogEntry(name, type_name, ())
        entries = dict(self.entries)
        for entry in [*self.entries.values(), target]:
            if entry.type == target.type:
                entries[entry.name] = replace(entry, references=entry.references + refs)
        return Catalog(entries)

    @cached_property
    def _references(self) -> dict[str, FloatArray]:
        """Each entry's references as `comparable` descriptors (R, D)."""
        return {n: np.array([comparable(a.histogram) for a in e.references]) for n, e in self.entries.items()}

    def costs(
        self, segments: Sequence[Appearance], names: Sequence[str], costs: LabelCosts = DEFAULT_COSTS
    ) -> FloatArray:
        """Matching cost (S, E) of every segment against every named entry (module
        docstring); inf against an entry without references."""
        hists = np.array([comparable(s.histogram) for s in segments]).reshape(len(segments), DESCRIPTOR_LENGTH)
        out = np.full((len(segments), len(names)), np.inf)
        for j, name in enumerate(names):
            entry, references = self.entry(name), self._references[name]
            if len(references) == 0:
                continue
            whole, partial = colour_cost(hists, references, costs.palette_share)
            for i, s in enumerate(segments):
                colour = whole[i]
                if s.partial and _smaller(s, entry, costs.partial_size_ratio, costs.size_slack_m):
                    colour = min(colour, costs.partial_view_cost + partial[i])
                out[i, j] = (
                    colour
                    + _size_cost(s.height_m, entry.height_m, costs)
                    + _size_cost(s.footprint_m, entry.footprint_m, costs)
                )
        return out

    def label(
        self,
        segments: Sequence[Appearance],
        *,
        candidates: Collection[str] | None = None,
        costs: LabelCosts = DEFAULT_COSTS,
    ) -> list[Match]:
        """One Match per segment of one frame, from the assignment of minimum total cost in
        which an entry labels at most one segment and a segment stays unlabelled rather than
        take a cost above `costs.max_cost`. `candidates` restricts the names (e.g. to the
        objects expected in this scene; default all); an unknown name raises UnknownNameError."""
        names = sorted(self.entries) if candidates is None else sorted(set(candidates))
        cost = self.costs(segments, names, costs)
        n_seg, n_ent = cost.shape
        if n_seg == 0:
            return []
        # Each segment has its own "unlabelled" column at the threshold cost.
        forbidden = 1e6
        padded = np.full((n_seg, n_ent + n_seg), forbidden)
        padded[:, :n_ent] = np.where(cost <= costs.max_cost, cost, forbidden)
        padded[np.arange(n_seg), n_ent + np.arange(n_seg)] = costs.max_cost
        best = cost.min(axis=1, initial=np.inf)
        out = [Match(None, 0.0, float(best[i])) for i in range(n_seg)]
        for i, j in zip(*linear_sum_assignment(padded), strict=True):
            if j < n_ent and cost[i, j] <= costs.max_cost:
                out[i] = Match(names[j], max(0.0, 1.0 - float(cost[i, j]) / costs.max_cost), float(cost[i, j]))
        return out

    # -- files ------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> Catalog:
        """Read a catalog file; ConfigError names the file, the field and the reason."""
        data = load_yaml_model(_CatalogFile, path)
        entries = {}
        for name, type_name in data.objects.items():
            kind = data.types[type_name]
            refs = tuple(Appearance(tuple(r.histogram), r.height_m, r.footprint_m, r.pixels) for r in kind.references)
            entries[name] = CatalogEntry(name, type_name, refs, kind.height_m, kind.footprint_m)
        return cls(entries)

    def save(self, path: Path, header: str = "") -> None:
        """Write the catalog as YAML (`objects`: name -> type; `types`: references and
        sizes once per type); `header` becomes a comment at the top."""
        types = {
            e.type: {
                "height_m": e.height_m,
                "footprint_m": e.footprint_m,
                "references": [
                    {
                        "histogram": list(a.histogram),
                        "height_m": a.height_m,
                        "footprint_m": a.footprint_m,
                        "pixels": a.pixels,
                    }
                    for a in e.references
                ],
            }
            for e in sorted(self.entries.values(), key=lambda e: e.type)
        }
        objects = {n: self.entries[n].type for n in sorted(self.entries)}
        text = yaml.safe_dump({"descriptor": DESCRIPTOR, "objects": objects}, sort_keys=False)
        text += yaml.safe_dump({"types": types}, sort_keys=False, default_flow_style=None, width=120)
        comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
        path.write_text(comment + text, encoding="utf-8")


def _smaller(segment: Appearance, entry: CatalogEntry, ratio: float, slack_m: float) -> bool:
    """Whether the segment is at most `ratio` of the entry's height or footprint."""
    return any(
        s is not None and e is not None and (s + slack_m) / (e + slack_m) <= ratio
        for s, e in ((segment.height_m, entry.height_m), (segment.footprint_m, entry.footprint_m))
    )


def _size_cost(segment_m: float | None, entry_m: float | None, costs: LabelCosts) -> float:
    if segment_m is None or entry_m is None:
        return 0.0
    log_ratio = math.log((segment_m + costs.size_slack_m) / (entry_m + costs.size_slack_m))
    over = max(0.0, log_ratio - math.log1p(costs.oversize_tolerance))
    under = max(0.0, -log_ratio - math.log1p(costs.undersize_tolerance))
    return costs.oversize_weight * over + costs.undersize_weight * under


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _AppearanceModel(_Strict):
    histogram: list[float] = Field(min_length=DESCRIPTOR_LENGTH, max_length=DESCRIPTOR_LENGTH)
    height_m: float | None = Field(None, ge=0.0, description="Top above the support plane, metres.")
    footprint_m: float | None = Field(None, ge=0.0, description="Largest horizontal width, metres.")
    pixels: int = Field(0, ge=0, description="Pixels the view was made from.")

    @model_validator(mode="after")
    def _non_negative(self) -> _AppearanceModel:
        if min(self.histogram) < 0 or sum(self.histogram) <= 0:
            raise ValueError("histogram needs non-negative bins with a positive sum")
        return self


class _TypeModel(_Strict):
    height_m: float | None = Field(None, ge=0.0, description="Nominal height, metres.")
    footprint_m: float | None = Field(None, ge=0.0, description="Nominal largest horizontal width, metres.")
    references: list[_AppearanceModel] = Field(min_length=1)


class _CatalogFile(_Strict):
    descriptor: str = Field(pattern=f"^{re.escape(DESCRIPTOR)}$", description="Layout of the histograms.")
    objects: dict[str, str] = Field(description="Object name -> type.")
    types: dict[str, _TypeModel]

    @model_validator(mode="after")
    def _known_types(self) -> _CatalogFile:
        for name, type_name in self.objects.items():
            if type_name not in self.types:
                raise ValueError(f"objects.{name}: {unknown_name_message('type', type_name, self.types)}")
        return self
