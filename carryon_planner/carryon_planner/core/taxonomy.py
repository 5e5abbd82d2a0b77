"""Preferences by meaning (issue 20): what a user's diet, allergy or stated wish rules out,
read through a curated taxonomy of foods and objects (config/planner/preferences.yaml).

* **Kinds.** `kinds` maps a kind to its members: words or phrases as objects are named
  (`turkey`, `hot dog`, `peanut butter`) or smaller kinds (`poultry` is in `meat`). A
  name's kinds are every kind above the words and phrases it is made of, matched word by
  word, longest phrase first, singular or plural: `turkey_slices` is turkey, poultry,
  meat; `peanut_butter` is peanut and nuts (not dairy); `eggplant` is no egg.
  `plant_based` phrases (`almond milk`, `veggie burger`) are listed under the kinds they
  are (almond milk is nuts) and never under the animal kinds their words suggest.
* **Diets.** `diets` maps a word or phrase a fact may hold (`vegetarian`, `lactose
  intolerant`, `halal`) to the kinds it rules out; said with a negation ("no longer
  vegetarian") it rules out nothing.
* **Allergies and wishes.** "allergic to X", "X allergy", "X-free", "no X", "doesn't eat
  X", "avoids / dislikes / hates X", and as requests say it "skip / hold X", "done with
  X", "instead of X": X (up to a word like "on", "today", "please") is read as kinds when
  the taxonomy knows it, else as the words themselves ("hates mushrooms" rules out
  anything named mushroom).
* **The request.** Its clauses are read like facts (`request_wishes`): what it states
  rules out for that request what the same words in memory would, before the plan has
  written them to memory ("I've gone vegan, make me a sandwich" gets no cheese).
* `rules_out` (the older table: a fact value -> object names) still applies as it is.

What the taxonomy does not know is not ruled out: a name none of whose words it lists
belongs to no kind (it is reported by `unknown_words`, for the LLM or a person to classify).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from carryon_common.core.config import read_yaml
from carryon_common.core.errors import ConfigError
from carryon_planner.core.words import reachable, singular_forms

_WORD = re.compile(r"[a-z0-9]+")
SAID = "you said: "  # how request_wishes marks what the request itself says
_NEGATED = re.compile(
    r"\b(?:no longer|not|never was|used to be|stopped being|done being|quit being|isn'?t|was once)\s+(?:a\s+|an\s+)?$"
)
_WISHES = (
    re.compile(r"allerg(?:y|ies|ic)\s+(?:to\s+)?(?P<x>[a-z0-9 _:,-]+)"),
    re.compile(r"(?P<x>[a-z0-9_-]+(?:\s[a-z0-9_-]+)?)\s+(?:allergy|allergies|intolerance|intolerant)\b"),
    re.compile(r"(?P<x>[a-z0-9]+)-free\b"),
    re.compile(r"\b(?:no|without)\s+(?!longer\b|more\b)(?P<x>[a-z0-9 _:,-]+)"),
    re.compile(
        r"(?:does\s?n[o']?t|do\s+not|don'?t|won'?t|will\s+not|can'?t|cannot|never|must\s+not)\s+"
        r"(?:eat|drink|have|touch|want)s?\s+(?P<x>[a-z0-9 _:,-]+)"
    ),
    re.compile(r"\b(?:avoids?|avoiding|dislikes?|hates?|refuses?)\s+(?P<x>[a-z0-9 _:,-]+)"),
    # As a request says it ("skip the cheese today", "I'm done with juice", "juice instead of coffee").
    re.compile(r"\b(?:skip|skips|skipping|hold|leave out|done with|instead of)\s+(?P<x>[a-z0-9 _:,-]+)"),
)
# Where the thing a wish names ends: "no cheese on my sandwich today" rules out cheese.
_THING_ENDS = re.compile(
    r"\b(?:on|in|at|for|from|today|tonight|tomorrow|now|this|that|please|just|thanks|because|since|but|then|"
    r"when|if|so|any ?more|again)\b"
)
_FILLER = {
    "a",
    "an",
    "the",
    "any",
    "all",
    "of",
    "and",
    "or",
    "food",
    "foods",
    "anything",
    "with",
    "products",
    "my",
    "your",
    "usual",
    "me",
    "it",
    "them",
}


def words(text: str) -> list[str]:
    """Lower-case words of a name or a phrase: `turkey_slices` -> [turkey, slices]."""
    return _WORD.findall(text.lower().replace("_", " "))


@dataclass(frozen=True)
class Taxonomy:
    kinds: Mapping[str, tuple[str, ...]]  # kind -> members (phrases or kinds)
    diets: Mapping[str, tuple[str, ...]]  # diet phrase -> kinds it rules out
    rules_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # fact value -> object names
    _parents: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _phrases: dict[tuple[str, ...], str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _longest: int = field(default=1, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for kind, members in self.kinds.items():
            self._phrases.setdefault(tuple(words(kind)), kind)
            for member in members:
                self._parents.setdefault(member, set()).add(kind)
                self._phrases.setdefault(tuple(words(member)), member)
        object.__setattr__(self, "_longest", max((len(p) for p in self._phrases), default=1))

    # -- what a name is ----------------------------------------------------------------
    def terms(self, name: str) -> list[str]:
        """The taxonomy's words and phrases in `name`, longest first, left to right."""
        return self._match(name)[0]

    def _match(self, name: str) -> tuple[list[str], list[str]]:
        """(terms present, terms said to be absent: "gluten" in "gluten_free_bread")."""
        tokens, i = words(name), 0
        present: list[str] = []
        freed: list[str] = []
        while i < len(tokens):
            for size in range(min(self._longest, len(tokens) - i), 0, -1):
                found = self._lookup(tuple(tokens[i : i + size]))
                if found is not None:
                    free = i + size < len(tokens) and tokens[i + size] == "free"
                    (freed if free else present).append(found)
                    i += size + int(free)
                    break
            else:
                i += 1
        return present, freed

    def _lookup(self, chunk: tuple[str, ...]) -> str | None:
        """The term `chunk` names, its last word singular or plural ("nut" is the kind nuts)."""
        *head, last = chunk
        for form in (last, *singular_forms(last)[1:], last + "s"):
            found = self._phrases.get((*head, form))
            if found is not None:
                return found
        return None

    def _above(self, terms: Iterable[str]) -> set[str]:
        return reachable(terms, self._parents)

    def kinds_of(self, name: str) -> set[str]:
        """Every kind `name` belongs to, and the terms it is made of; what its name says it
        is free of is left out (gluten-free bread is no gluten; lactose-free milk is still dairy)."""
        present, freed = self._match(name)
        return self._above(present) - set(freed)

    def unknown_words(self, name: str) -> list[str]:
        """Words of `name` the taxonomy cannot place (a name made only of them has no kind)."""
        return self._unknown(name, *self._match(name))

    @staticmethod
    def _unknown(name: str, present: list[str], freed: list[str]) -> list[str]:
        known = {w for t in (*present, *freed) for w in words(t)} | {"free"}
        return [w for w in words(name) if not {*singular_forms(w), w + "s"} & known]

    # -- what a user's fact rules out ----------------------------------------------------
    def excluded(self, value: str) -> set[str]:
        """Kinds (or, for words the taxonomy does not know, the words) `value` rules out."""
        text = value.strip().lower()
        out: set[str] = set()
        for diet, kinds in self.diets.items():
            for match in re.finditer(rf"\b{re.escape(diet)}\b", text):
                if not _NEGATED.search(text[: match.start()]):
                    out |= set(kinds)
        for pattern in _WISHES:
            for match in pattern.finditer(text):
                named = _THING_ENDS.split(match.group("x"), maxsplit=1)[0]
                thing = " ".join(w for w in words(named) if w not in _FILLER)
                if not thing or any(re.search(rf"\b{re.escape(d)}\b", thing) for d in self.diets):
                    continue  # "no longer vegan" is about a diet, read above
                terms = self.terms(thing)
                if terms:
                    out |= set(terms)
                else:  # words the taxonomy does not know stand for themselves, in any number
                    out |= {s for w in words(thing) for s in singular_forms(w)}
        return out

    def rules_out_name(self, name: str, values: Iterable[str]) -> str | None:
        """The first fact value that rules `name` out, with why (`vegetarian: meat`), or None."""
        return self._why(name, [(value, self.excluded(value)) for value in values])

    def _why(self, name: str, exclusions: Sequence[tuple[str, set[str]]]) -> str | None:
        """rules_out_name with each value's exclusions read once (`ruled_out` reads many names)."""
        present, freed = self._match(name)
        kinds = self._above(present) - set(freed)
        plain = {s for w in self._unknown(name, present, freed) for s in singular_forms(w)}  # wishes of unknown words
        for value, excluded in exclusions:
            listed = self.rules_out.get(value.strip().lower(), ())
            if name in listed or any(w in listed for w in re.findall(r"[a-z_]+", name)):  # the exact table
                return value.strip()
            hit = sorted(excluded & (kinds | plain))
            if hit:
                spoken = name.replace("_", " ")
                said = [h for h in hit if h != spoken]  # "meat is meat" says nothing
                return f"{value.strip()}: {spoken} is {', '.join(said)}" if said else value.strip()
        return None


def request_wishes(request: str, locations: Iterable[str] = ()) -> list[str]:
    """The clauses of a request, each as "you said: <clause>", for the taxonomy to read like
    a fact: what a request states rules out for that request what a remembered fact would
    ("I've gone vegan, make me a sandwich": no cheese, before memory says vegan; "skip the
    cheese today"; "juice instead of coffee"). A clause that names one of `locations` is
    about where things are ("on the sofa instead of the shelf"), not a wish: left out."""
    places = [" ".join(words(p)) for p in locations]
    clauses = [" ".join(c.split()) for c in re.split(r"[.;!?,]|\bbut\b", request.lower())]
    return [
        f"{SAID}{c}"
        for c in clauses
        if words(c) and not any(re.search(rf"\b{re.escape(p)}\b", " ".join(words(c))) for p in places if p)
    ]


def load_taxonomy(path: Path) -> Taxonomy:
    """config/planner/preferences.yaml: `kinds`, `diets` and the older `rules_out`."""
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with kinds, diets and rules_out")
    tables: dict[str, dict[str, tuple[str, ...]]] = {}
    for key in ("kinds", "diets", "rules_out"):
        table = raw.get(key, {})
        if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
            raise ConfigError(f"{path}: expected '{key}: {{name: [member, ...]}}'")
        tables[key] = {str(k).lower(): tuple(str(m).lower() for m in v) for k, v in table.items()}
    unknown = sorted({k for ks in tables["diets"].values() for k in ks} - set(tables["kinds"]))
    if unknown:
        raise ConfigError(f"{path}: diets name kinds that `kinds` does not define: {', '.join(unknown)}")
    return Taxonomy(tables["kinds"], tables["diets"], tables["rules_out"])


def ruled_out(names: Iterable[str], values: Sequence[str], taxonomy: Taxonomy) -> dict[str, str]:
    """name -> why, for the names the user's fact values rule out."""
    exclusions = [(value, taxonomy.excluded(value)) for value in values]
    out: dict[str, str] = {}
    for name in names:
        why = taxonomy._why(name, exclusions)
        if why is not None:
            out[name] = why
    return out
