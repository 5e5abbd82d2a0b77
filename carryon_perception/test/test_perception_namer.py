"""The `namer: vlm` option against the local OpenAI-compatible stub server (real HTTP on
loopback, the shared client): a PNG crop per unknown object, asked once per track, names
applied with the track id kept, failures and timeouts reported and retried later."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from perception_fixtures import Box, NoRobot, overhead, tiny_config, tiny_config_dir
from PIL import Image
from pydantic import ValidationError

from carryon_common.core.errors import ConfigError
from carryon_common.core.openai_client import OpenAiClient, ResponseFormat
from carryon_perception.core.build import build_namer, build_perception
from carryon_perception.core.namer import NamerParams, VlmNameAsker, VlmNamer, clean_name
from carryon_perception.core.open_vocab import Unnamed
from carryon_perception.core.regions import NamedMask
from carryon_perception.core.tabletop import TabletopPerception
from carryon_perception.core.types import PerceptionResult, is_unknown
from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer

MUG: Box = ((30, 50, 30, 46), 0.09, (30, 60, 200))
KNOWN = ("carrot", "pink_cover")


@pytest.fixture
def stub() -> Iterator[StubVlmServer]:
    with StubVlmServer() as server:
        yield server


def namer_at(stub: StubVlmServer, **params: Any) -> VlmNamer:
    settings = NamerParams(**{"request_timeout_s": 5.0, "retry_s": 10.0, **params})
    client = OpenAiClient(stub.base_url, model="stub-vlm", timeout_s=settings.request_timeout_s, attempts=1)
    return VlmNamer(VlmNameAsker(client, KNOWN, settings), settings)


def perceive(perception: TabletopPerception, stamp_s: float, boxes: tuple[Box, ...] = (MUG,)) -> PerceptionResult:
    return perception.perceive([overhead(list(boxes))], {}, None, stamp_s)


def settle(namer: VlmNamer) -> None:
    assert namer.wait(10.0), "the namer's request did not finish"


def pipeline(namer: VlmNamer, recogniser: object = None) -> TabletopPerception:
    return TabletopPerception(Unnamed(), NoRobot(), namer=namer, recogniser=recogniser)  # type: ignore[arg-type]


def test_an_unknown_object_is_asked_about_once_and_keeps_its_track_id(stub: StubVlmServer) -> None:
    stub.push({"name": "Blue Mug"})
    namer = namer_at(stub)
    perception = pipeline(namer)
    first = perceive(perception, 0.0)
    (unknown,) = first.objects
    assert is_unknown(unknown.label)  # the name is not there yet: perception never waits for the model
    settle(namer)
    for stamp in (0.1, 0.2, 0.3):
        (named,) = perceive(perception, stamp).objects
        assert named.label == "blue_mug" and named.track_id == unknown.track_id
    segmentation = perceive(perception, 0.4).segmentations["top"]
    assert segmentation.labels[unknown.track_id] == "blue_mug"
    (request,) = stub.requests  # once per object, not once per frame
    assert request.body["model"] == "stub-vlm" and request.body["response_format"] == {"type": "json_object"}
    assert "KNOWN names: carrot, pink_cover" in "\n".join(request.texts())
    (url,) = request.image_urls()
    assert url.startswith("data:image/png;base64,")
    crop = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
    # the mug (20 x 16 px) and a margin of table around it, not the whole image
    assert 20 < crop.shape[0] < 40 and 16 < crop.shape[1] < 36
    assert (crop[crop.shape[0] // 2, crop.shape[1] // 2] == MUG[2]).all()
    namer.close()


def test_a_known_name_is_taken_as_the_catalog_spells_it(stub: StubVlmServer) -> None:
    stub.push('```json\n{"name": "the Pink Cover"}\n```')
    namer = namer_at(stub)
    perception = pipeline(namer)
    perceive(perception, 0.0)
    settle(namer)
    assert [o.label for o in perceive(perception, 0.1).objects] == ["pink_cover"]


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (StubReply(status=500), "HTTP 500"),
        ("a blue mug, I think", "unusable reply"),
        ({"name": None}, "named nothing"),
        ({"name": "robot"}, "unusable name"),
        ({"label": "mug"}, "unusable reply"),
    ],
)
def test_a_failed_request_keeps_unknown_reports_once_and_is_retried_later(
    stub: StubVlmServer, reply: Any, why: str
) -> None:
    stub.push(reply, {"name": "mug"})
    namer = namer_at(stub, retry_s=10.0)
    perception = pipeline(namer)
    perceive(perception, 0.0)
    settle(namer)
    failed = perceive(perception, 1.0)
    assert is_unknown(failed.objects[0].label)
    (note,) = failed.diagnostics
    assert why in note and failed.objects[0].label in note
    quiet = perceive(perception, 2.0)
    assert not quiet.diagnostics and len(stub.requests) == 1  # reported once; not asked again before retry_s
    perceive(perception, 11.5)  # retry_s after the failure was seen
    settle(namer)
    assert len(stub.requests) == 2 and perceive(perception, 12.0).objects[0].label == "mug"


def test_a_request_past_its_timeout_is_reported(stub: StubVlmServer) -> None:
    stub.push(StubReply({"name": "mug"}, delay_s=3.0))
    namer = namer_at(stub, request_timeout_s=0.3)
    perception = pipeline(namer)
    perceive(perception, 0.0)
    settle(namer)
    result = perceive(perception, 0.5)
    assert is_unknown(result.objects[0].label) and "no reply within 0.3 s" in result.diagnostics[0]


def test_a_name_another_object_holds_is_not_given_twice(stub: StubVlmServer) -> None:
    class CarrotHere:  # an open-vocab stand-in that names the carrot
        def recognise(self, view: object) -> list[NamedMask]:
            mask = np.zeros((96, 96), dtype=bool)
            mask[70:80, 10:30] = True
            return [NamedMask("carrot", 0.9, mask)]

    carrot: Box = ((70, 80, 10, 30), 0.04, (240, 120, 20))
    stub.push({"name": "carrot"})
    namer = namer_at(stub)
    perception = pipeline(namer, CarrotHere())
    perceive(perception, 0.0, (MUG, carrot))
    settle(namer)
    labels = sorted(o.label for o in perceive(perception, 0.1, (MUG, carrot)).objects)
    assert labels[0] == "carrot" and is_unknown(labels[1])
    assert len(stub.requests) == 1  # only the unknown one was asked about


def test_names_are_cleaned_into_labels() -> None:
    assert clean_name("A paper towel!", KNOWN) == "paper_towel"
    assert clean_name("Carrot", KNOWN) == "carrot"
    for bad in ("", "table", "robot", "unknown_2", "support_1", "3d printer", "x" * 41):
        assert clean_name(bad, KNOWN) is None, bad


def test_the_option_is_built_from_config(stub: StubVlmServer, tmp_path: Path) -> None:
    config = tiny_config(namer="vlm", namer_base_url=stub.base_url, namer_model="stub-vlm", namer_json_mode=False)
    namer = build_namer(config, ["carrot"])
    assert isinstance(namer, VlmNamer) and isinstance(namer.ask, VlmNameAsker)
    assert isinstance(namer.ask.chat, OpenAiClient) and namer.ask.chat.response_format == ResponseFormat.NONE
    namer.close()
    perception = build_perception(config, tiny_config_dir(tmp_path))
    assert isinstance(perception.namer, VlmNamer)
    assert build_namer(tiny_config(), []) is None
    remote = tiny_config(namer="vlm", namer_base_url="https://vlm.example.org/v1", namer_api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        build_namer(remote, [])
    with pytest.raises(ValidationError, match="vlm"):
        tiny_config(namer="vml")
