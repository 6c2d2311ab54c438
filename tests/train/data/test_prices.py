"""User price tables (``--prices``): read from JSON or YAML, every entry two numbers per model."""

from __future__ import annotations

import re

import pytest

from proteus_train.data.prices import price_table, read_price_file

EXPECTED = "expected (input, output) USD per 1M tokens, two numbers, or {'input': x, 'output': y}"


@pytest.mark.parametrize("text, shown", [
    ("gpt-x: '35'\n", "'35'"),  # not read as its characters (3.0, 5.0)
    ("gpt-x: [true, false]\n", "[True, False]"),  # not 1.0 / 0.0
    ("gpt-x: [1, 2, 3]\n", "[1, 2, 3]"),
    ("gpt-x: {input: '1', output: 2}\n", "{'input': '1', 'output': 2}"),
])
def test_a_price_that_is_not_two_numbers_is_refused_naming_the_file_the_model_and_the_form(tmp_path, text, shown):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        read_price_file(str(path))
    assert str(refused.value) == f"{path}: prices['gpt-x'] = {shown}; {EXPECTED}"


def test_a_table_that_does_not_parse_is_an_error_naming_the_file(tmp_path):
    yaml_path, json_path = tmp_path / "prices.yaml", tmp_path / "prices.json"
    yaml_path.write_text("a: [1, 2\n")
    json_path.write_text("{bad json")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(yaml_path))}: not a YAML price table \(expected ',' or '\]', but got '<stream end>' at line 2 column 1\)$"):
        read_price_file(str(yaml_path))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(json_path))}: not a JSON price table \(Expecting property name"):
        read_price_file(str(json_path))


def test_numbers_in_either_form_are_read():
    table = price_table({"a": (1, 2), "b": {"input": 1.5, "output": 3}, "c": [0, 0.5]})
    assert (table["a"], table["b"], table["c"]) == ((1.0, 2.0), (1.5, 3.0), (0.0, 0.5))
    with pytest.raises(ValueError, match=r"prices\['d'\] = .*; prices must be finite and >= 0"):
        price_table({"d": [10**400, 1]})
