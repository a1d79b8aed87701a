"""The tool call the grammar demo asks for: its JSON schema, and a validator the schema cannot be.

The schema is what a grammar engine enforces token by token: an object with a
tool ``name`` and its ``arguments``, every value one of a fixed list. The
``Policy`` is what a real tool-call validator adds at run time and no grammar
compiled ahead of time can say: which tools this session enabled, which
cities the user has saved, and that the unit agrees with the city. Nothing
here imports torch or a grammar engine: ``schema_problems`` checks a parsed
value against the schema in plain Python, so the demo's count of valid
outputs does not rest on the engine that produced them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

__all__ = [
    "CITY_UNIT",
    "TOOLS",
    "TOOL_CALL_SCHEMA",
    "Policy",
    "schema_problems",
]

#: The tools a grammar allows; a session enables some of them.
TOOLS: Final = ("weather", "forecast", "alerts")
#: The cities the grammar allows, each with the unit its forecasts use. First letters
#: differ, so banning a value's first token rules out that value and no other.
CITY_UNIT: Final[Mapping[str, str]] = {
    "Oslo": "C",
    "Lima": "C",
    "Reno": "F",
    "Kyiv": "C",
    "Doha": "C",
    "Boise": "F",
    "Tulsa": "F",
    "Graz": "C",
}
UNITS: Final = ("C", "F")
#: The longest forecast the schema allows, in days.
MAX_DAYS: Final = 7

#: The tool call as a JSON schema: the part of the contract a grammar can enforce.
TOOL_CALL_SCHEMA: Final[Mapping[str, object]] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": list(TOOLS)},
        "arguments": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": list(CITY_UNIT)},
                "unit": {"type": "string", "enum": list(UNITS)},
                "days": {"type": "integer", "minimum": 1, "maximum": MAX_DAYS},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}


@attrs.frozen
class Policy:
    """The run-time half of the contract: enabled tools, saved cities, units that agree.

    ``problem(path, value, call)`` judges one complete value in the context of
    the values before it (``call`` maps paths to them); ``problems(call)`` the
    whole parsed call.
    """

    tools: frozenset[str]
    cities: frozenset[str]
    #: The most days the forecast service covers today.
    max_days: int

    @classmethod
    def drawn(cls, rng: random.Random, *, tools: int = 2, cities: int = 3) -> Policy:
        """A session's policy: ``tools`` enabled tools, ``cities`` saved cities, a day limit."""
        return cls(
            frozenset(rng.sample(TOOLS, tools)),
            frozenset(rng.sample(sorted(CITY_UNIT), cities)),
            rng.randint(MAX_DAYS - 3, MAX_DAYS - 1),
        )

    def problem(
        self, path: tuple[str, ...], value: object, before: Mapping[tuple[str, ...], object]
    ) -> str | None:
        """Why the value at ``path`` is refused given the values ``before`` it; None: approved."""
        if path == ("name",) and value not in self.tools:
            return f"tool {value!r} is not enabled (enabled: {', '.join(sorted(self.tools))})"
        if path == ("arguments", "city") and value not in self.cities:
            return f"city {value!r} is not saved (saved: {', '.join(sorted(self.cities))})"
        if path == ("arguments", "days") and isinstance(value, int) and value > self.max_days:
            return f"{value} days is beyond today's limit of {self.max_days}"
        if path == ("arguments", "unit"):
            city = before.get(("arguments", "city"))
            if isinstance(city, str) and CITY_UNIT.get(city) != value:
                return f"unit {value!r} disagrees with {city} ({CITY_UNIT.get(city)})"
        return None

    def problems(self, call: object) -> list[str]:
        """Every value of a parsed ``call`` the policy refuses, in document order."""
        seen: dict[tuple[str, ...], object] = {}
        found: list[str] = []
        for path, value in _leaves(call, ()):
            problem = self.problem(path, value, seen)
            if problem is not None:
                found.append(problem)
            seen[path] = value
        return found

    def to_dict(self) -> dict[str, object]:
        return {
            "tools": sorted(self.tools),
            "cities": sorted(self.cities),
            "max_days": self.max_days,
        }


def _leaves(value: object, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], object]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    return [(path, value)]


# -- the schema in plain Python ---------------------------------------------------------------

# The keywords TOOL_CALL_SCHEMA uses. A schema with any other is refused rather than half
# checked, so a keyword added to the schema cannot be silently ignored here.
_KEYWORDS: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "minimum", "maximum"}
)


def schema_problems(value: object, schema: Mapping[str, object], path: str = "$") -> list[str]:
    """Where ``value`` (parsed JSON) breaks ``schema``; empty when it conforms.

    Checks the subset of JSON Schema the tool call uses: ``type`` (object,
    string, integer), ``properties``, ``required``, ``additionalProperties:
    false``, ``enum``, ``minimum`` and ``maximum``.
    """
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"schema keywords {sorted(unknown)} at {path} are not checked here")
    kind = schema.get("type")
    if kind == "object":
        return _object_problems(value, schema, path)
    found = []
    if kind == "string" and not isinstance(value, str):
        found.append(f"{path}: expected a string, got {value!r}")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        found.append(f"{path}: expected an integer, got {value!r}")
    enum = schema.get("enum")
    if isinstance(enum, Sequence) and value not in enum:
        found.append(f"{path}: expected one of {list(enum)}, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        least, most = schema.get("minimum"), schema.get("maximum")
        if isinstance(least, int) and value < least:
            found.append(f"{path}: expected >= {least}, got {value}")
        if isinstance(most, int) and value > most:
            found.append(f"{path}: expected <= {most}, got {value}")
    return found


def _object_problems(value: object, schema: Mapping[str, object], path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object, got {value!r}"]
    properties = schema.get("properties", {})
    assert isinstance(properties, Mapping)
    required = schema.get("required", [])
    assert isinstance(required, Sequence)
    found = [f"{path}: missing {key!r}" for key in required if key not in value]
    for key, item in value.items():
        if key in properties:
            found += schema_problems(item, properties[key], f"{path}.{key}")
        elif schema.get("additionalProperties") is False:
            found.append(f"{path}: unexpected key {key!r}")
    return found
