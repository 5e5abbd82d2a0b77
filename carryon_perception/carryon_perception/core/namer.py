"""The `namer: vlm` option: unidentified objects named by a vision-language model.

For each `unknown_<n>` object, a crop of the colour image around it (from the camera that
sees most of it) goes as a PNG data URL to an OpenAI-compatible chat endpoint (the shared
client the judge uses), which answers a short name: one of the known object names, or a
free noun ("mug"). The answer is kept per track id, so each object is asked about once,
not every frame; the object then carries that name with its track id unchanged.

Requests run on one worker thread: perception never waits for the model (the shield needs
its masks at the camera rate). The first frames of a new object report `unknown_<n>`; the
name appears from the frame after the answer. A failed request (no connection, timeout,
an unusable reply) keeps `unknown_<n>`, is reported once in that frame's diagnostics and is
retried after `retry_s`. A name another object of the frame already holds is not applied.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from carryon_common.core.errors import CarryOnError
from carryon_common.core.llm import ChatMessage, ImagePart, LlmClient, LlmError
from carryon_perception.core.types import ROBOT_LABEL, TABLE_LABEL, PerceivedObject, is_unknown

UInt8Image = npt.NDArray[np.uint8]

SYSTEM_PROMPT = """You name one object on a robot's work table from a photo crop centred on it.
Answer with ONE JSON object and nothing else: {"name": "<name>"}.
If the object is one of the KNOWN names, answer that name exactly.
Otherwise answer a short common noun for it: one or two lowercase words, e.g. "mug" or "paper towel".
If the crop shows no object you can name, answer {"name": null}."""

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class NamerError(CarryOnError):
    """No usable name for a crop (the request failed, or the reply names nothing)."""


@dataclass(frozen=True)
class NamerParams:
    request_timeout_s: float = 10.0  # bound on one request, seconds
    retry_s: float = 30.0  # a failed object is asked again after this long (frame stamps), seconds
    image_max_px: int = 256  # the crop's longer side is scaled down to at most this, pixels
    margin: float = 0.25  # the crop grows by this share of the object's box on every side
    min_margin_px: int = 4  # ...and by at least this many pixels
    max_pending: int = 4  # requests waiting or running at once; further objects wait for a later frame


def object_crop(
    rgb: UInt8Image, instances: npt.NDArray[np.int32], track_id: int, params: NamerParams
) -> UInt8Image | None:
    """The part of `rgb` (H, W, 3) around the pixels of `track_id` in `instances` (H, W),
    grown by the margins; None when the camera does not see it."""
    rows, cols = np.nonzero(instances == track_id)
    if len(rows) == 0:
        return None
    r0, r1, c0, c1 = int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1
    grow_r = max(params.min_margin_px, round(params.margin * (r1 - r0)))
    grow_c = max(params.min_margin_px, round(params.margin * (c1 - c0)))
    height, width = instances.shape
    return np.ascontiguousarray(
        rgb[max(0, r0 - grow_r) : min(height, r1 + grow_r), max(0, c0 - grow_c) : min(width, c1 + grow_c)]
    )


def png_part(rgb: UInt8Image, max_px: int) -> ImagePart:
    """An (H, W, 3) uint8 image as a PNG data URL, its longer side at most `max_px`."""
    from PIL import Image

    image = Image.fromarray(rgb, "RGB")
    scale = max_px / max(image.size)
    if scale < 1.0:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return ImagePart.from_bytes(buffer.getvalue(), "image/png")


def clean_name(raw: str, known: Sequence[str]) -> str | None:
    """The reply's name as a label: a known name when it is one (spaces or case aside), else
    snake_case of at most 40 characters; None when it is empty, malformed or a label
    perception keeps for itself (robot, table, support_<n>, unknown_<n>)."""
    words = re.sub(r"[^a-z0-9]+", " ", raw.strip().lower()).split()
    while words and words[0] in ("a", "an", "the"):
        words = words[1:]
    name = "_".join(words)
    if name in known:
        return name
    if not _NAME.match(name) or name in (ROBOT_LABEL, TABLE_LABEL) or name.startswith("support_") or is_unknown(name):
        return None
    return name


def parse_reply(text: str) -> str | None:
    """The `name` of a `{"name": ...}` reply (a fenced ```json block is accepted); None
    when the model named nothing. ValueError for anything else."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    data = json.loads(body)
    if not isinstance(data, dict) or "name" not in data:
        raise ValueError('expected a JSON object {"name": ...}')
    name = data["name"]
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name is a {type(name).__name__}, not a string")
    return name or None


class VlmNameAsker:
    """Asks the chat model for one crop's name; blocks up to the request timeout. `chat`:
    the shared OpenAI-compatible client (one attempt per call) or any LlmClient; `known`:
    the object names it should prefer (the catalog's)."""

    def __init__(self, chat: LlmClient, known: Sequence[str], params: NamerParams) -> None:
        self.chat = chat
        self.known = tuple(known)
        self.params = params

    def __call__(self, crop: UInt8Image) -> str:
        """The name; NamerError when the request fails or the reply names nothing usable."""
        known = ", ".join(self.known) or "(none)"
        user = (
            f"KNOWN names: {known}\nName the object in the centre of this crop.",
            png_part(crop, self.params.image_max_px),
        )
        messages = [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", user)]
        try:
            text = self.chat.complete(messages, None, timeout_s=self.params.request_timeout_s)
        except LlmError as exc:
            raise NamerError(str(exc)) from None
        try:
            raw = parse_reply(text)
        except ValueError as exc:
            raise NamerError(f"unusable reply ({exc}): {text[:120]!r}") from None
        if raw is None:
            raise NamerError("the model named nothing")
        name = clean_name(raw, self.known)
        if name is None:
            raise NamerError(f"unusable name {raw[:60]!r}")
        return name


class VlmNamer:
    """The `Namer` of the tabletop pipeline (module docstring): `ask` names one crop
    (VlmNameAsker, or any callable raising NamerError) on a worker thread; answers are kept
    per track id."""

    def __init__(self, ask: Callable[[UInt8Image], str], params: NamerParams | None = None) -> None:
        self.ask = ask
        self.params = params or NamerParams()
        self.names: dict[int, str] = {}  # track id -> name
        self._pending: dict[int, tuple[str, Future[str]]] = {}  # track id -> (its label then, request)
        self._retry_at: dict[int, float] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="perception-namer")

    def rename(
        self,
        objects: Sequence[PerceivedObject],
        images: Sequence[tuple[UInt8Image, npt.NDArray[np.int32]]],
        now_s: float,
    ) -> tuple[list[PerceivedObject], list[str]]:
        notes = self._collect(now_s)
        taken = {o.label for o in objects if not is_unknown(o.label)}
        relabel: dict[str, str] = {}
        for obj in objects:
            if not is_unknown(obj.label):
                continue
            name = self.names.get(obj.track_id)
            if name is not None:
                if name not in taken:
                    relabel[obj.label] = name
                    taken.add(name)
            elif self._due(obj.track_id, now_s):
                crop = self._crop(obj.track_id, images)
                if crop is not None:
                    self._pending[obj.track_id] = (obj.label, self._worker.submit(self.ask, crop))
        if not relabel:
            return list(objects), notes
        renamed = [
            replace(o, label=relabel.get(o.label, o.label), support=relabel.get(o.support, o.support)) for o in objects
        ]
        return renamed, notes

    def wait(self, timeout_s: float) -> bool:
        """Wait until no request is running (tests, shutdown); whether none is."""
        _, running = wait([future for _, future in self._pending.values()], timeout=timeout_s)
        return not running

    def close(self) -> None:
        """Stop the worker; requests not yet started are dropped."""
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _due(self, track_id: int, now_s: float) -> bool:
        return (
            track_id not in self._pending
            and now_s >= self._retry_at.get(track_id, -np.inf)
            and len(self._pending) < self.params.max_pending
        )

    def _crop(self, track_id: int, images: Sequence[tuple[UInt8Image, npt.NDArray[np.int32]]]) -> UInt8Image | None:
        """The crop from the camera that sees most of the object."""
        seen = [int(np.count_nonzero(instances == track_id)) for _, instances in images]
        if not seen or max(seen) == 0:
            return None
        rgb, instances = images[int(np.argmax(seen))]
        return object_crop(rgb, instances, track_id, self.params)

    def _collect(self, now_s: float) -> list[str]:
        """Answers that came back since the last frame; a diagnostic for each failure."""
        notes = []
        for track_id, (label, future) in list(self._pending.items()):
            if not future.done():
                continue
            del self._pending[track_id]
            try:
                self.names[track_id] = future.result()
            except NamerError as exc:
                self._retry_at[track_id] = now_s + self.params.retry_s
                notes.append(f"namer: {label} (track {track_id}) stays unnamed: {exc}")
        return notes
