"""The mutation report's verdicts: what counts as killed, as a survivor, as explained, and the kill rate."""
from __future__ import annotations

import pytest
import yaml

from tests.scripts import load_script

report = load_script("mutation_report")

LINES = {"a.b.x_f__mutmut_1": "return x + 1", "a.b.x_f__mutmut_2": "return x - 2",
         "a.b.xǁCǁg__mutmut_1": "if n <= 1:", "a.c.x_h__mutmut_1": "y = None"}


def test_module_names_are_read_off_functions_and_methods():
    assert report.module_of("pagedbench.engines.kv.paged.xǁPagedKVǁfork__mutmut_3") == "pagedbench.engines.kv.paged"
    assert report.module_of("pagedbench.results.record.summary.x_steady__mutmut_1") == "pagedbench.results.record.summary"


def test_killed_timed_out_survived_and_unreached_mutants_are_counted_apart():
    status = {"a.b.x_f__mutmut_1": "killed", "a.b.x_f__mutmut_2": "timeout", "a.b.xǁCǁg__mutmut_1": "survived",
              "a.c.x_h__mutmut_1": "no tests"}
    counts, problems = report.judge(status, {}, LINES.get)
    assert counts["a.b"] == {"killed": 2, "survived": 1} and counts["a.c"] == {"survived": 1}
    assert problems == ["survived, not explained: a.b.xǁCǁg__mutmut_1: if n <= 1:",
                        "no tests, not explained: a.c.x_h__mutmut_1: y = None"]


def test_an_explained_survivor_is_equivalent_while_its_line_still_reads_the_same():
    status = {"a.b.xǁCǁg__mutmut_1": "survived", "a.c.x_h__mutmut_1": "no tests"}
    explained = {"a.b.xǁCǁg__mutmut_1": {"line": " if n <= 1: ", "why": "n is never 1"},
                 "a.c.x_h__mutmut_1": {"line": "y = 0", "why": "moved since"}}
    counts, problems = report.judge(status, explained, LINES.get)
    assert counts["a.b"] == {"equivalent": 1} and counts["a.c"] == {"equivalent": 1}
    assert problems == ["stale explanation: a.c.x_h__mutmut_1 no longer reads 'y = 0'"]


def test_an_explanation_of_a_killed_or_vanished_mutant_is_stale():
    """mutmut numbers mutants within a function: an edit can move a number onto another line; the line check
    catches a survivor, and these catch an explained name that is killed or gone."""
    status = {"a.b.x_f__mutmut_1": "killed", "a.b.x_f__mutmut_2": "survived"}
    explained = {"a.b.x_f__mutmut_1": {"line": "return x + 1", "why": "no longer"},
                 "a.b.x_f__mutmut_2": {"line": "return x - 2", "why": "still the same"},
                 "a.b.x_f__mutmut_9": {"line": "y = 1", "why": "gone since"}}
    counts, problems = report.judge(status, explained, LINES.get)
    assert counts["a.b"] == {"killed": 1, "equivalent": 1}
    assert problems == ["stale explanation: a.b.x_f__mutmut_9 is no mutant any more",
                        "stale explanation: a.b.x_f__mutmut_1 is killed now (its number may have moved: judge again)"]


def test_the_kill_rate_leaves_out_equivalents_and_unchecked_mutants_and_flags_low_modules():
    from collections import Counter

    counts = {"a.b": Counter(killed=8, survived=1, equivalent=3, **{"not checked": 5}),
              "a.c": Counter(killed=3, survived=1)}
    lines, low = report.rate_table(counts, min_kill=80)
    by_module = {line.split()[0]: line.split() for line in lines[1:]}
    assert by_module["a.b"][1:] == ["17", "12", "8", "3", "1", "88.9%"]     # 8 / (12 - 3)
    assert by_module["a.c"][-1] == "75.0%"
    assert by_module["all"][1:] == ["21", "16", "11", "3", "2", "84.6%"]    # 11 / (16 - 3)
    assert low == ["a.c: kill rate 75.0% < 80%"]


@pytest.mark.parametrize("name, entry", sorted((yaml.safe_load(report.EQUIVALENT.read_text()) or {}).items()))
def test_every_explanation_names_a_mutant_its_line_and_why(name, entry):
    assert report.LINE.match(f"    {name}: survived"), name
    assert set(entry) == {"line", "why"} and entry["line"].strip() and len(entry["why"]) >= 10
