"""Configuration of planner_node."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from carryon_common.core.config import one_of
from carryon_common.core.operator_auth import NodeIdentityConfig, OperatorAuthConfig

LLM_BACKENDS = ("local", "local_inprocess", "openai", "scripted")
TEXT_ONLY_BACKENDS = ("local", "local_inprocess")  # the offline model reads no images
OBSERVE_SOURCES = ("perception", "none")
LOCAL_MODELS = ("0.5b", "1.5b")
PLAN_FORMATS = ("auto", "full", "steps")


class PlannerConfig(OperatorAuthConfig, NodeIdentityConfig):
    signs_requests: ClassVar[bool] = True  # its memory writes, on a request's behalf

    llm_backend: Annotated[str, one_of("LLM backend", LLM_BACKENDS)] = Field(
        "local",
        description="LLM backend by name: 'local' (the offline model served by llm_server_node, which "
        "`carryon up` then starts; no key), 'local_inprocess' (the same model loaded in this process), 'openai' "
        "(any OpenAI-compatible endpoint) or 'scripted' (NOT AN LLM: scripted replies, for the demo).",
    )
    llm_base_url: str = Field("", description="Base URL of the OpenAI-compatible endpoint ('' = backend default).")
    llm_model: str = Field("", description="Model name sent to the endpoint ('' = backend default).")
    llm_local_url: str = Field(
        "", description="local: llm_server_node's OpenAI base URL ('' = http://127.0.0.1:8421/v1, its default)."
    )
    llm_api_key_env: str = Field(
        "OPENAI_API_KEY", description="Name of the environment variable holding the API key (never the key itself)."
    )
    llm_model_path: str = Field(
        "",
        description="local_inprocess: GGUF model file ('' = the pinned model llm_local_model names).",
    )
    llm_script_file: str = Field("", description="scripted: the replies ('' = <config dir>/planner/demo_script.yaml).")
    llm_local_model: Annotated[str, one_of("local model", LOCAL_MODELS)] = Field(
        "1.5b",
        description="local_inprocess: the pinned model to assemble when llm_model_path is '' "
        "('1.5b' Qwen2.5-Coder-1.5B; '0.5b' Qwen2.5-Coder-0.5B: smaller download, worse plans; "
        "bash scripts/setup_llm.sh --model 0.5b).",
    )
    llm_threads: int = Field(2, ge=1, description="local_inprocess: CPU threads for decoding.")
    llm_context_tokens: int = Field(8192, ge=1024, description="local_inprocess: context window, tokens.")
    llm_timeout_s: float = Field(120.0, gt=0.0, description="Timeout of one LLM request, seconds.")
    plan_format: Annotated[str, one_of("plan format", PLAN_FORMATS)] = Field(
        "auto",
        description="What the LLM answers with: 'full' (every subtask's fields and dependencies), 'steps' (only "
        "each step's instruction and condition, the rest derived: core/steps.py; about a third of the tokens, "
        "made for small models) or 'auto' (steps for the offline model, local and local_inprocess; full otherwise).",
    )
    max_repairs: int = Field(2, ge=0, description="Validation-repair rounds before a safe refusal.")
    service_timeout_s: float = Field(5.0, gt=0.0, description="Timeout of calls to other nodes' services, seconds.")
    llm_images: bool = Field(
        False,
        description="Send the user's reference images (remember_image) with each plan request, for an "
        "image-capable endpoint (openai with a vision model). Off, and always with the text-only local model: "
        "the request names each image with the entity's stored description instead.",
    )
    llm_schema_in_request: bool = Field(
        False,
        description="Send the plan's JSON Schema inside response_format (llama.cpp's server then constrains "
        "decoding to it); off: JSON mode with the schema in the prompt only.",
    )
    skills_file: str = Field(
        "",
        description="Skill library YAML ('' = <config dir>/skills/library.yaml, config dir from $CARRYON_CONFIG_DIR).",
    )
    preferences_file: str = Field(
        "",
        description="Preferences the validator enforces, e.g. vegetarian rules out meat ('' = "
        "<config dir>/planner/preferences.yaml).",
    )
    food_knowledge_file: str = Field(
        "",
        description="Curated food knowledge: what each food holds, so a diet or allergy is settled yes / no / "
        "unknown, and unknown means ask ('' = <config dir>/planner/food_knowledge.yaml; docs/planner.md).",
    )
    classify_unknown_names: bool = Field(
        False,
        description="Before planning for a user with preference facts, ask the LLM once which taxonomy kinds the "
        "scene's and library's object names that preferences.yaml does not know are (meat, nuts, ...), so a diet "
        "or allergy rules them out too (core/learned_kinds.py). Off: such names are never ruled out.",
    )
    learned_kinds_file: str = Field(
        "",
        description="JSON file keeping the LLM's classifications across runs ('' = kept in memory for the node's "
        "life only).",
    )
    # --- the executive (Assist) ---
    policy_step_budget: int = Field(400, ge=1, description="Control steps one VLA subtask may use (all resumptions).")
    max_recoveries: int = Field(2, ge=0, description="Recovery attempts per VLA subtask before it fails.")
    max_replans: int = Field(2, ge=0, description="Replans after observations that contradict scene memory.")
    judge_period_s: float = Field(1.0, gt=0.0, description="Seconds between the executive's verdict requests.")
    action_timeout_s: float = Field(10.0, gt=0.0, description="Wait for an action server to accept / stop a goal, s.")
    recover_timeout_s: float = Field(180.0, gt=0.0, description="Longest one recovery may take before it is cancelled.")
    recovery_skill: str = Field("", description="Recovery skill to run ('' = recovery_node's default_skill).")
    observe_source: Annotated[str, one_of("observe source", OBSERVE_SOURCES)] = Field(
        "perception",
        description="What observe subtasks read: 'perception' (perception_node's perception/scene: what the "
        "cameras see in the location's region) or 'none' (observe subtasks fail).",
    )
    observe_scenes: int = Field(
        3,
        ge=1,
        description="Consecutive perception/scenes one observe combines: an item is in the look when at least half "
        "of them show it (one frame's segmentation does not decide a replan).",
    )
    observe_look: bool = Field(
        True,
        description="When no camera sees an observed location, move the wrist camera over it first (recovery_node's "
        "`look` skill, through the shield), then look again; false = the observe reports it could not see.",
    )
    observe_min_unidentified_m: float = Field(
        0.03,
        ge=0.0,
        description="Unidentified objects smaller than this across (m) are left out of a look: fragments at the "
        "edge of the arm or of what it holds (they stay obstacles for the shield).",
    )
    locations_file: str = Field(
        "",
        description="Named locations an observe looks at, regions on the table (config/planner/locations.yaml "
        "layout), relative to the config folder ('' = planner/locations.yaml; the robot profile names its own).",
    )
    summarise: bool = Field(
        True, description="After each finished Assist, store the lasting facts the LLM proposes (checked)."
    )

    @property
    def plans_in_steps(self) -> bool:
        """Whether the LLM is asked for step plans (plan_format, 'auto' resolved by the backend)."""
        if self.plan_format == "auto":
            return self.llm_backend in TEXT_ONLY_BACKENDS
        return self.plan_format == "steps"
