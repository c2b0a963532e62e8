"""The README's results block: rendered from the report's records, put between its markers, stamped with the
result code that made them."""
import pytest

from pagedbench.results.record.result_code import result_code
from pagedbench.results.report import headline


def test_the_block_replaces_what_is_between_its_markers_and_nothing_else():
    text = f"# R\n\nbefore\n\n{headline.README_START}\nold tables\n{headline.README_END}\n\nafter\n"
    block = f"{headline.README_START}\nnew, result-affecting code `0123456789ab`\n{headline.README_END}\n"
    new = headline.replace_block(text, block)
    assert new == f"# R\n\nbefore\n\n{block.strip()}\n\nafter\n"
    assert headline.block_code(new) == "0123456789ab"
    assert headline.block_code(text) is None
    with pytest.raises(ValueError, match="no results block"):
        headline.replace_block("# R\n", block)


def test_without_records_the_block_says_so_and_names_this_code(tmp_path):
    block = headline.headline(tmp_path)
    assert block.startswith(headline.README_START) and block.rstrip().endswith(headline.README_END)
    assert headline.block_code(block) == result_code()
    assert block.count("no records; `make report` makes them") == 3


def test_the_readme_keeps_one_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{headline.README_START}\nx\n{headline.README_END}\nend\n")
    headline.update_readme(tmp_path, readme)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\nend\n")
    assert text.count(headline.README_START) == 1 and text.count(headline.README_END) == 1
    assert headline.block_code(text) == result_code()
