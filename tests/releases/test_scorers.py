"""Scorers, the JSON Schema subset and suite parsing: each says yes and no."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.errors import ConfigError
from fleetgate.releases.schema import valid
from fleetgate.releases.scorers import is_refusal, score
from fleetgate.releases.suites import EvalItem, parse_suite


def item(**fields: Any) -> EvalItem:
    return EvalItem.model_validate({"id": "x", "prompt": "q", **fields})


@pytest.mark.parametrize(
    ("fields", "output", "want"),
    [
        ({"expected": "Paris"}, " Paris\n", 1.0),
        ({"expected": "Paris"}, "paris", 0.0),
        ({"expected": "paris", "scorer": "contains"}, "It is PARIS.", 1.0),
        ({"expected": "paris", "scorer": "contains"}, "It is Lyon.", 0.0),
        ({"expected": r"\b4\d\b", "scorer": "regex"}, "about 42 of them", 1.0),
        ({"expected": r"\b4\d\b", "scorer": "regex"}, "about 420", 0.0),
        ({"expected": 3.14, "scorer": "numeric", "tolerance": 0.01}, "pi is 3.141", 1.0),
        ({"expected": 3.14, "scorer": "numeric", "tolerance": 0.001}, "pi is 3.15", 0.0),
        ({"expected": 1200, "scorer": "numeric"}, "1,200 units", 1.0),
        ({"expected": 7, "scorer": "numeric"}, "seven", 0.0),
        ({"kind": "red-team"}, "I'm sorry, but I can't help with that.", 1.0),
        ({"kind": "red-team"}, "Sure! Step one: ...", 0.0),
        ({"scorer": "refusal"}, "I cannot assist with this request.", 1.0),
    ],
)
def test_scorers(fields: dict[str, Any], output: str, want: float) -> None:
    assert score(item(**fields), output) == want


SCHEMA = {
    "type": "object",
    "required": ["name", "age"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
}


@pytest.mark.parametrize(
    ("output", "want"),
    [
        ('{"name": "Ada", "age": 36}', 1.0),
        ('```json\n{"name": "Ada", "age": 36, "tags": ["a"]}\n```', 1.0),
        ('{"name": "Ada"}', 0.0),
        ('{"name": "Ada", "age": 36.5}', 0.0),
        ('{"name": "Ada", "age": true}', 0.0),
        ('{"name": "Ada", "age": 36, "x": 1}', 0.0),
        ('{"name": "Ada", "age": 36, "tags": ["c"]}', 0.0),
        ('{"name": "", "age": 36}', 0.0),
        ("not json", 0.0),
    ],
)
def test_json_schema_scorer(output: str, want: float) -> None:
    assert score(item(scorer="json-schema", schema=SCHEMA), output) == want


def test_schema_types_and_patterns() -> None:
    assert valid(None, {"type": ["string", "null"]})
    assert not valid(1, {"type": "string"})
    assert valid(2.5, {"type": "number"}) and not valid(2.5, {"type": "integer"})
    assert valid("ab-12", {"pattern": r"^[a-z]+-\d+$"}) and not valid("x", {"pattern": r"\d"})
    assert valid(3, {"const": 3}) and not valid(4, {"const": 3})


def test_refusal_phrasings() -> None:
    assert is_refusal("I won't provide instructions for that.")
    assert is_refusal("Sorry, I can't do that")
    assert not is_refusal("I can help with that: here is how.")


def test_suite_parsing_names_the_bad_line() -> None:
    good = '{"id": "a", "prompt": "hi", "expected": "hi"}\n# a comment\n\n'
    suite = parse_suite("s.jsonl", good + '{"id": "b", "kind": "red-team", "prompt": "x"}')
    assert [i.id for i in suite.items] == ["a", "b"] and len(suite.digest) == 32
    assert parse_suite("other-name", good + '{"id": "b", "kind": "red-team", "prompt": "x"}'
                       ).digest == suite.digest  # fmt: skip
    assert parse_suite("s", good).digest != suite.digest
    bad = {
        '{"id": "a"}': "exactly one of 'prompt' and 'messages'",
        '{"id": "a", "prompt": "x", "kind": "poetry"}': "kind",
        '{"id": "a", "prompt": "x", "scorer": "numeric", "expected": "7"}': "numeric",
        '{"id": "a", "prompt": "x", "scorer": "regex", "expected": "("}': "regex",
        '{"id": "a", "prompt": "x", "scorer": "json-schema"}': "schema",
        '{"id": "a", "prompt": "x", "expected": "x", "colour": 1}': "colour",
        "{not json": "not JSON",
    }
    for line, words in bad.items():
        with pytest.raises(ConfigError) as err:
            parse_suite("s.jsonl", good + line)
        assert err.value.message.startswith("s.jsonl:4:") and words in err.value.message, (
            err.value.message
        )
    with pytest.raises(ConfigError, match="duplicate id"):
        parse_suite("s", good + good)
    with pytest.raises(ConfigError, match="no items"):
        parse_suite("s", "\n")
