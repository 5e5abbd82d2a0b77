"""The planning step: one request and the user's memory in, a valid plan or a safe
refusal out (docs/planner.md follows a request through it).

1. **Read the request once**: what it says objects hold (core/answers.py), a remembered
   preference it revises or a new allergy it states (core/wishes.py).
2. **The user's facts as they hold for this request**: what the user said about objects is
   no constraint of theirs; a diet or an allergy is lifted only in the user's own words
   (core/protected.py `in_force`). Then the facts to check against, once
   (core/facts.py `planning_facts`: what is ruled out and what is unsettled).
3. **The model proposes** (core/context.py builds its messages).
4. **Check, mend, check** (core/repair.py), and the reply confirms a lifted constraint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from carryon_common.core.llm import LlmClient
from carryon_common.core.skills import SkillLibrary
from carryon_planner.core.answers import answers_in, confirmations_from, is_answer
from carryon_planner.core.choose import relevant_to
from carryon_planner.core.constraints import rules_out_of
from carryon_planner.core.context import Endpoint, LibraryEntry, build_messages, described_images
from carryon_planner.core.executive import with_hidden
from carryon_planner.core.facts import planning_facts, preference_texts, scene_and_library_objects
from carryon_planner.core.knowledge import FoodKnowledge
from carryon_planner.core.learned_kinds import LearnedKinds
from carryon_planner.core.memory_ops import FactGuard, MemoryContext
from carryon_planner.core.protected import confirm_in_reply, fact_guard, in_force
from carryon_planner.core.repair import PlanningOutcome, plan_with_repair
from carryon_planner.core.taxonomy import Taxonomy
from carryon_planner.core.validator import Validator
from carryon_planner.core.wishes import stated_allergy, stated_wish


@dataclass(frozen=True)
class RequestPlanner:
    """Plans one request with the user's memory: context builder, validator, repair loop."""

    llm: LlmClient
    library: SkillLibrary
    preferences: Taxonomy
    max_repairs: int
    validator: Validator = field(default_factory=Validator)
    learned: LearnedKinds | None = None  # names the taxonomy does not know, asked of the LLM (None: not asked)
    knowledge: FoodKnowledge | None = None  # the curated food knowledge (None: the taxonomy alone decides)
    images: bool = False  # send the user's reference images (else each is named with its description)
    steps: bool = False  # the LLM answers with step plans (core/steps.py), not full plans

    def plan(
        self,
        user_id: str,
        text: str,
        context: MemoryContext,
        observations: Mapping[str, Sequence[str]] | None = None,
    ) -> PlanningOutcome:
        """A valid plan or a safe refusal for `text`; `observations` (location -> items
        seen) are what execution revealed, for a replan."""
        seen = with_hidden(observations or {}, context.scene)  # a camera cannot see under a cover
        rules, notes = self.preferences, []
        objects = scene_and_library_objects(context.scene, self.library)
        if self.learned is not None and context.facts:  # only a user with facts can have something ruled out
            notes = self.learned.learn(self.llm, objects, rules)
            rules = self.learned.taxonomy(rules)
        stored = [(f.entity, f.key, f.value) for f in context.facts]
        others = [u for u in context.other_users if u != user_id]
        # 1. The request, read once: what it says objects hold, a preference it revises, a new allergy.
        answers = answers_in(text, sorted(objects), self.knowledge, user_id)
        wish = stated_wish(
            text,
            stored,
            instructions=self.library.instructions,
            names=sorted(objects),
            locations=context.scene,
            taxonomy=rules,
            other_users=[u.lower() for u in others],
        ) or stated_allergy(text, stored)
        # 2. The user's facts as they hold for this request (what the user said about objects
        # settles those objects and is no constraint; a lifted diet is lifted in the user's words).
        own = in_force([f for f in stored if not is_answer(f[1], self.knowledge)], wish, text, self.rules_out)
        facts = planning_facts(
            request=text,
            scene=context.scene,
            library=self.library,
            user_facts=[value for _, _, value in own],
            foreign_facts=context.foreign_values,
            other_users=others,
            pending_observations=seen,
            preference_rules=rules,
            preferences=preference_texts(own),
            knowledge=self.knowledge,
            confirmations=(*answers, *confirmations_from(stored, self.knowledge, user_id)),
        )
        relevant = relevant_to(self.llm, text, context.facts, sorted(facts.objects))
        facts = dataclasses.replace(
            facts, remembered=tuple(r.remembered() for r in relevant), wish=wish, answers=answers
        )
        # 3. The model proposes; 4. check, mend, check (core/repair.py).
        messages = build_messages(
            request=text,
            user_id=user_id,
            memory=context.rendered,
            endpoints=[Endpoint(name) for name in sorted(context.scene)],
            library=[LibraryEntry(s.instruction, s.description) for s in self.library.vla],
            observations=seen,
            images=context.images if self.images else (),
            described=described_images(context.facts) if not self.images else (),
            ruled_out={name: why for name, why in facts.ruled_out.items() if name in facts.objects},
            steps=self.steps,
            relevant=relevant,
        )
        outcome = plan_with_repair(
            self.llm, messages, facts, max_repairs=self.max_repairs, validator=self.validator, steps=self.steps
        )
        said = confirm_in_reply(outcome.plan, stored, self.rules_out, text)  # a lifted allergy or diet
        outcome = dataclasses.replace(outcome, plan=said) if said is not outcome.plan else outcome
        return dataclasses.replace(outcome, notes=(*notes, *outcome.notes)) if notes else outcome

    def rules_out(self, text: str) -> set[str]:
        """What a fact's text rules out: kinds and words (core/constraints.py)."""
        return rules_out_of(text, self.preferences, self.knowledge)

    def fact_guard(self, context: MemoryContext, request: str | None, who: str) -> FactGuard:
        """`who`'s writes: an allergy or a diet weakened only as `request` says (core/protected.py)."""
        return fact_guard([(f.entity, f.key, f.value) for f in context.facts], self.rules_out, request, who)
