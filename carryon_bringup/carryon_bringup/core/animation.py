"""The frames of a run's animation: a recorded camera image with what happened around it.

Pure: takes images and the run's timeline as plain data (sim seconds throughout), returns
Pillow images; `carryon_bringup.report_animation` reads them from the bag and writes the
file. Each frame shows, above the image, the user's request and the sim time; around the
image a border in the colour of the shield's latest decision; below it the active subtask
by its instruction and the shield's decision in words (released whole / released a prefix
/ retreat / rejected), and a strip with every shield decision of the run and a cursor at now.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

RGB = tuple[int, int, int]
ImageArray = npt.NDArray[np.uint8]  # (height, width, 3) RGB

# Shield decision kinds (carryon_shield's Decision names, lower case) and their colour.
RELEASED_ALL = "released_all"
RELEASED_PREFIX = "released_prefix"
RETREAT = "retreat"
DECISION_COLOURS: dict[str, RGB] = {
    RELEASED_ALL: (46, 160, 67),
    RELEASED_PREFIX: (232, 140, 20),
    RETREAT: (214, 48, 39),
}
REJECTED_COLOUR: RGB = (120, 120, 128)  # every rejected_* kind
IDLE_COLOUR: RGB = (60, 60, 66)  # no shield decision lately
BACKGROUND: RGB = (24, 24, 28)
TEXT: RGB = (236, 236, 240)
DIM_TEXT: RGB = (170, 170, 180)
RECOVERING_COLOUR: RGB = (232, 140, 20)

SHIELD_HOLD_S = 1.5  # a decision stays on the frame this long (sim s) when no newer one came
BORDER_PX = 6
HEADER_PX = 26
PANEL_PX = 66
STRIP_PX = 14


@dataclass(frozen=True)
class ShieldMark:
    """One shield decision on one chunk, at `t_s` (sim s)."""

    t_s: float
    decision: str  # RELEASED_ALL, RELEASED_PREFIX, RETREAT or rejected_<why>
    released: int  # steps released (retreat: steps of the retreat move)
    total: int  # steps in the chunk
    obstacle: str  # what blocked it ('' when nothing did)
    reason: str  # the shield's reason, as published

    @property
    def severity(self) -> int:
        """Higher = further from released whole (rejected > retreat > prefix > whole)."""
        if self.decision.startswith("rejected"):
            return 3
        return {RELEASED_ALL: 0, RELEASED_PREFIX: 1, RETREAT: 2}.get(self.decision, 3)

    @property
    def colour(self) -> RGB:
        return DECISION_COLOURS.get(self.decision, REJECTED_COLOUR)

    def words(self) -> str:
        """The decision in a few words, for the banner."""
        near = f" (near {self.obstacle})" if self.obstacle else ""
        if self.decision == RELEASED_ALL:
            return f"shield: released all {self.total} steps"
        if self.decision == RELEASED_PREFIX:
            return f"shield: released {self.released} of {self.total} steps, held the rest{near}"
        if self.decision == RETREAT:
            return f"shield: blocked, retreat {self.released} steps{near}"
        why = self.decision.removeprefix("rejected_").replace("_", " ")
        return f"shield: rejected ({why}), nothing released"


@dataclass(frozen=True)
class PlanMark:
    """What the planner was doing from `t_s` (sim s) on: its request, state and active subtask."""

    t_s: float
    request: str
    plan_state: str  # planning / validating / executing / succeeded / ...
    subtask_id: str  # '' between subtasks
    instruction: str  # the active subtask's instruction (or objective)
    subtask_state: str  # active / recovering / ...


@dataclass(frozen=True)
class FrameOverlay:
    """What one frame shows besides the image."""

    t_s: float
    request: str
    doing: str  # the active subtask, '' when none
    recovering: bool
    shield: ShieldMark | None  # the decision to show, None when none lately


def overlay_at(t_s: float, since_s: float, plan: Sequence[PlanMark], shield: Sequence[ShieldMark]) -> FrameOverlay:
    """The overlay of the frame at `t_s`, the previous frame being at `since_s` (sim s).

    Shows the most severe shield decision in (since_s, t_s], so a blocked step between two
    frames is never hidden by a release after it; with none in that interval, the latest
    one within SHIELD_HOLD_S. `plan` and `shield` are sorted by time.
    """
    now = [p for p in plan if p.t_s <= t_s]
    current = now[-1] if now else None
    doing = ""
    if current is not None:
        if current.subtask_id:
            doing = f"{current.subtask_id}: {current.instruction or '(no instruction)'}"
        else:
            doing = f"plan {current.plan_state}" if current.plan_state else ""
    recent = [s for s in shield if since_s < s.t_s <= t_s]
    shown = max(recent, key=lambda s: (s.severity, s.t_s)) if recent else None
    if shown is None:
        before = [s for s in shield if t_s - SHIELD_HOLD_S <= s.t_s <= t_s]
        shown = before[-1] if before else None
    return FrameOverlay(
        t_s=t_s,
        request=current.request if current else "",
        doing=doing,
        recovering=bool(current and current.subtask_state == "recovering"),
        shield=shown,
    )


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _fit(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: int) -> str:
    """`text`, cut with an ellipsis to fit `width` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text.rstrip() + "…"


def compose_frame(
    image: ImageArray,
    overlay: FrameOverlay,
    span_s: tuple[float, float],
    shield: Sequence[ShieldMark],
    scale: float = 1.5,
) -> Image.Image:
    """One animation frame (RGB): `image` (height, width, 3) scaled by `scale`, framed as the
    module docstring says. `span_s` = (first, last) sim time of the animation, for the strip."""
    camera = Image.fromarray(np.ascontiguousarray(image[..., :3]), "RGB")
    if scale != 1.0:
        camera = camera.resize((round(camera.width * scale), round(camera.height * scale)), Image.Resampling.BILINEAR)
    width = camera.width + 2 * BORDER_PX
    height = HEADER_PX + camera.height + 2 * BORDER_PX + PANEL_PX + STRIP_PX
    frame = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(frame)
    big, small = _font(15), _font(12)

    clock = f"sim {overlay.t_s:6.1f} s"
    clock_w = int(draw.textlength(clock, font=big))
    request = _fit(draw, f'"{overlay.request}"' if overlay.request else "CarryOn", big, width - clock_w - 24)
    draw.text((8, 5), request, font=big, fill=TEXT)
    draw.text((width - clock_w - 8, 5), clock, font=big, fill=DIM_TEXT)

    top = HEADER_PX
    border = overlay.shield.colour if overlay.shield else IDLE_COLOUR
    draw.rectangle((0, top, width - 1, top + camera.height + 2 * BORDER_PX - 1), fill=border)
    frame.paste(camera, (BORDER_PX, top + BORDER_PX))

    y = top + camera.height + 2 * BORDER_PX + 4
    doing = overlay.doing or "waiting for a request"
    label = "recovering " if overlay.recovering else ""
    if label:
        label_w = int(draw.textlength(label, font=big))
        draw.text((8, y), label, font=big, fill=RECOVERING_COLOUR)
    else:
        label_w = 0
    draw.text((8 + label_w, y), _fit(draw, doing, big, width - 16 - label_w), font=big, fill=TEXT)
    y += 22
    if overlay.shield is not None:
        words = _fit(draw, overlay.shield.words(), big, width - 24)
        draw.rectangle((4, y - 1, 12 + int(draw.textlength(words, font=big)), y + 19), fill=overlay.shield.colour)
        draw.text((8, y + 1), words, font=big, fill=(255, 255, 255))
        if overlay.shield.decision != RELEASED_ALL:
            draw.text((8, y + 22), _fit(draw, overlay.shield.reason, small, width - 16), font=small, fill=DIM_TEXT)
    else:
        draw.text((8, y + 1), "shield: no chunk", font=big, fill=DIM_TEXT)

    strip_top = height - STRIP_PX
    first, last = span_s
    length = max(last - first, 1e-6)

    def x_of(t: float) -> int:
        return 4 + round((width - 9) * min(max((t - first) / length, 0.0), 1.0))

    draw.rectangle((4, strip_top + 2, width - 5, height - 3), fill=IDLE_COLOUR)
    for mark in sorted(shield, key=lambda s: s.severity):  # blocked ones drawn last, on top
        x = x_of(mark.t_s)
        draw.line((x, strip_top + 2, x, height - 3), fill=mark.colour, width=2 if mark.severity else 1)
    cursor = x_of(overlay.t_s)
    draw.rectangle((cursor - 1, strip_top, cursor + 1, height - 1), fill=TEXT)
    return frame


def pick_frames(times_s: Sequence[float], busy: Sequence[bool], idle_every: int = 4) -> list[int]:
    """Indices of the frames to keep: every frame while the robot is busy, every
    `idle_every`-th while it waits (planning, idle), and always the first and the last."""
    keep: list[int] = []
    idle_run = 0
    for i, is_busy in enumerate(busy):
        if is_busy:
            keep.append(i)
            idle_run = 0
            continue
        if idle_run % idle_every == 0 or i == len(times_s) - 1:
            keep.append(i)
        idle_run += 1
    return keep


def encode_gif(frames: Sequence[Image.Image], fps: float, hold_last_s: float = 2.5, colours: int = 255) -> bytes:
    """An animated GIF (looping) of `frames` at `fps`, the last frame held `hold_last_s`.

    One palette for all frames, taken from a sample of them, and no dithering, so a pixel
    that did not change keeps its index; each later frame stores only its changed pixels,
    the others transparent over the frame before (long runs of one index, which LZW packs
    well). `colours` <= 255: one index is kept for transparency.
    """
    if not frames:
        raise ValueError("no frames to encode")
    if not 2 <= colours <= 255:
        raise ValueError(f"colours must be 2..255, got {colours}")
    sample = frames[:: max(1, len(frames) // 12)]
    montage = Image.new("RGB", (sample[0].width, sample[0].height * len(sample)))
    for i, f in enumerate(sample):
        montage.paste(f, (0, i * sample[0].height))
    palette = montage.quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    clear = 255  # the transparent index, above every colour the palette uses
    indexed: list[Image.Image] = []
    previous: npt.NDArray[np.uint8] | None = None
    for f in frames:
        pixels = np.asarray(f.quantize(palette=palette, dither=Image.Dither.NONE), dtype=np.uint8)
        shown = pixels if previous is None else np.where(pixels == previous, np.uint8(clear), pixels)
        previous = pixels
        image = Image.fromarray(shown, "P")
        image.putpalette(palette.getpalette() or [])
        indexed.append(image)
    frame_ms = round(1000 / fps)
    durations = [frame_ms] * (len(indexed) - 1) + [max(frame_ms, round(hold_last_s * 1000))]
    out = io.BytesIO()
    indexed[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=indexed[1:],
        duration=durations,
        loop=0,
        disposal=1,  # keep each frame under the next: its transparent pixels show the one before
        transparency=clear,
        optimize=False,
    )
    return out.getvalue()


def write_gif(frames: Sequence[Image.Image], path: Path, fps: float) -> int:
    """Write `encode_gif(frames, fps)` to `path`; returns its size in bytes."""
    data = encode_gif(frames, fps)
    path.write_bytes(data)
    return len(data)
