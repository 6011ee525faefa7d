from __future__ import annotations

from pathlib import Path

from toolkit.logs import tail, tail_file


def test_tail_keeps_the_last_lines_and_says_when_there_were_none() -> None:
    assert tail("one\ntwo\nthree\n", 2) == "two\nthree"
    assert tail("  \n") == "(no output)"


def test_tail_file_reads_the_end_of_a_log_or_says_there_is_none(tmp_path: Path) -> None:
    log = tmp_path / "pool.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    assert tail_file(log, 3) == "line 97\nline 98\nline 99"
    assert tail_file(tmp_path / "missing.log") == "(no log)"
