"""Markers in both of Hudi's layouts (direct files and the coordinator's ``MARKERS<N>`` files), read
together; marker names checked before anything is written; the settings that send a write's
markers to the writer-coordinator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.table_builder import TableBuilder
from tidemark.errors import MarkerError, TableError
from tidemark.storage import LocalStorage
from tidemark.table.coordinator_client import coordinator_timeout_s, coordinator_url
from tidemark.table.markers import (
    IOType,
    Marker,
    create_marker,
    format_marker_file,
    list_markers,
    marker_file_index,
    parse_marker_file,
    read_marker_files,
)

INSTANT = "20250101000000000"


def test_a_write_s_markers_are_read_from_both_layouts_each_once(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    folder = f".hoodie/.temp/{INSTANT}"
    storage.write(f"{folder}/MARKERS.type", b"TIMELINE_SERVER_BASED")
    storage.write(f"{folder}/MARKERS0", format_marker_file(["p=1/a_0-1-0_1.parquet.marker.CREATE"]))
    storage.write(
        f"{folder}/MARKERS7",
        b"p=2/.b_1.log.1_0-1-0.marker.APPEND\n\np=1/a_0-1-0_1.parquet.marker.CREATE\n",  # blank line, a repeat
    )
    create_marker(storage, INSTANT, "p=3/c_0-1-0_1.parquet", IOType.CREATE)  # a task that fell back
    assert [(m.data_path, m.io_type) for m in list_markers(storage, INSTANT)] == [
        ("p=1/a_0-1-0_1.parquet", IOType.CREATE),
        ("p=2/.b_1.log.1_0-1-0", IOType.APPEND),
        ("p=3/c_0-1-0_1.parquet", IOType.CREATE),
    ]
    assert sorted(read_marker_files(storage, INSTANT)) == [0, 7]


def test_a_damaged_markers_file_is_an_error_naming_it(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write(f".hoodie/.temp/{INSTANT}/MARKERS0", b"p=1/a.parquet.marker.CREATE\n../../x.marker.CREATE\n")
    with pytest.raises(MarkerError, match=r"MARKERS0.*inside the table"):
        list_markers(storage, INSTANT)
    storage.write(f".hoodie/.temp/{INSTANT}/MARKERS0", b"\xff\xfe")
    with pytest.raises(MarkerError, match="not UTF-8"):
        list_markers(storage, INSTANT)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("p=1/a_0-1-0_1.parquet.marker.CREATE", True),
        ("a_0-1-0_1.parquet.marker.MERGE", True),  # a table without partitions
        ("year=2024/month=01/.a_1.log.2_0-1-0.marker.APPEND", True),
        ("p=1/a.parquet", False),
        ("p=1/a.parquet.marker.WRITE", False),
        ("../a.parquet.marker.CREATE", False),
        ("p=1/../../a.parquet.marker.CREATE", False),
        ("/etc/a.parquet.marker.CREATE", False),
        ("p=1//a.parquet.marker.CREATE", False),
        ("p=1\\..\\a.parquet.marker.CREATE", False),
        (".marker.CREATE", False),
    ],
)
def test_marker_names(name: str, ok: bool) -> None:
    if ok:
        assert Marker.parse(INSTANT, name).name == name
    else:
        with pytest.raises(MarkerError):
            Marker.parse(INSTANT, name)


def test_markers_file_names_and_content() -> None:
    assert [marker_file_index(n) for n in ("MARKERS0", "MARKERS12", "MARKERS.type", "MARKERS", "MARKERSx")] == [
        0,
        12,
        None,
        None,
        None,
    ]
    assert marker_file_index("MARKERS99999999999") is None  # past Java's int, which Hudi parses it as
    names = ["p=1/a.parquet.marker.CREATE", "p=2/b.parquet.marker.MERGE"]
    assert format_marker_file(names) == b"p=1/a.parquet.marker.CREATE\np=2/b.parquet.marker.MERGE\n"
    assert parse_marker_file(format_marker_file(names), "MARKERS0") == names


def test_the_coordinator_is_used_only_when_asked_and_settings_are_checked() -> None:
    assert coordinator_url({}) is None
    # the URL alone was ignored (DIRECT by default) and the write used direct markers unseen
    for markers, said in [({}, "is not set (DIRECT)"), ({"hoodie.write.markers.type": "direct"}, "is 'direct'")]:
        with pytest.raises(TableError) as refused:
            coordinator_url({**markers, "tidemark.writer.coordinator.url": "http://c:9500"})
        assert str(refused.value) == (
            "tidemark.writer.coordinator.url=http://c:9500 is only used with "
            f"hoodie.write.markers.type=TIMELINE_SERVER_BASED, and hoodie.write.markers.type {said}: "
            "set it, or drop the URL for direct markers"
        )
    timeline = {"hoodie.write.markers.type": "timeline_server_based"}
    assert coordinator_url({**timeline, "tidemark.writer.coordinator.url": "http://c:9500/"}) == "http://c:9500"
    with pytest.raises(TableError, match=r"needs tidemark\.writer\.coordinator\.url"):
        coordinator_url(timeline)
    with pytest.raises(TableError, match="http"):
        coordinator_url({**timeline, "tidemark.writer.coordinator.url": "c:9500"})
    with pytest.raises(TableError, match="DIRECT or TIMELINE_SERVER_BASED"):
        coordinator_url({"hoodie.write.markers.type": "SOMETIMES"})
    assert coordinator_timeout_s({}) == 10
    with pytest.raises(TableError, match="milliseconds"):
        coordinator_timeout_s({"tidemark.writer.coordinator.timeout.ms": "soon"})


def test_a_commit_leaves_no_marker_folder_behind(tmp_path: Path) -> None:
    """Hudi deletes an instant's marker folder once it completes; empty folders were left, one
    per instant and partition."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    t.update(["a"], 2)
    assert list((tmp_path / ".hoodie" / ".temp").rglob("*")) == []
