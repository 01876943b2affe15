"""lm-eval's task index cached on disk (:mod:`recdiff.lm_eval.task_index`): a second process gets the same index
without building it, an edited, added or removed task file builds it anew, and a cache that cannot be read or written
costs only the build; lm-eval's own TaskManager (the one its command line makes) goes through it, and a folder of
tasks added to lm-eval's (``include_path``) is merged over them as lm-eval merges it. On a folder that stands for
lm-eval's own (``CACHED_ROOT``): lm-eval's ~16k files take seconds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install -e ".[lm-eval]"')

from lm_eval.tasks import TaskManager

from recdiff.lm_eval import task_index  # importing recdiff.lm_eval installs the cache
from recdiff.lm_eval.task_index import cache_dir

LM_EVAL_BUILD = task_index._build   # TaskIndex.build as lm-eval defines it


def task(folder: Path, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"task: {name}\ndataset_path: json\noutput_type: generate_until\ntest_split: test\n"
                    "doc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n")
    return path


@pytest.fixture
def tasks(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "tasks"
    folder.mkdir()
    task(folder, "alpha")
    task(folder, "beta")
    monkeypatch.setattr(task_index, "CACHED_ROOT", folder.resolve())   # stands for lm-eval's own tasks
    return folder


def build(folder: Path) -> TaskManager:
    return TaskManager(include_path=str(folder), include_defaults=False)   # as lm-eval's command line makes it


def index(tm: TaskManager) -> dict[str, str]:
    return {name: str(entry.yaml_path) for name, entry in tm.task_index.items()}


def no_build(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the index was built, not read from the cache")

    monkeypatch.setattr(task_index, "_build", refuse)   # lm-eval's own TaskIndex.build


def test_a_second_process_reads_the_index_it_did_not_build(tasks, monkeypatch):
    first = build(tasks)
    assert set(first.all_subtasks) == {"alpha", "beta"}
    assert len(list(cache_dir().glob("lm_eval-tasks*.pkl"))) == 1
    with monkeypatch.context() as m:
        no_build(m)
        second = build(tasks)
    assert second is not first and index(second) == index(first)
    assert second.all_subtasks == first.all_subtasks


@pytest.mark.parametrize("change", ["edit", "add", "remove"])
def test_a_changed_task_file_builds_the_index_anew_in_the_same_cache_file(tasks, change):
    build(tasks)
    if change == "edit":   # another name inside the same file, its time stamp moved on as an editor would
        path = tasks / "alpha.yaml"
        path.write_text(path.read_text().replace("task: alpha", "task: gamma"))
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        want = {"gamma", "beta"}
    elif change == "add":
        task(tasks, "gamma")
        want = {"alpha", "beta", "gamma"}
    else:
        (tasks / "beta.yaml").unlink()
        want = {"alpha"}
    assert set(build(tasks).all_subtasks) == want
    assert len(list(cache_dir().glob("lm_eval-tasks*.pkl"))) == 1   # overwritten, not piled up
    assert set(build(tasks).all_subtasks) == want                     # and read back as such


def test_an_unreadable_cache_is_built_anew_and_written_over(tasks, monkeypatch):
    first = build(tasks)
    (path,) = cache_dir().glob("lm_eval-tasks*.pkl")
    path.write_bytes(path.read_bytes()[:100])        # truncated
    assert index(build(tasks)) == index(first)
    with monkeypatch.context() as m:                 # the file is whole again
        no_build(m)
        assert index(build(tasks)) == index(first)


def test_a_cache_folder_that_cannot_be_written_costs_only_the_build(tasks, tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))   # the cache folder would be under a file
    assert set(build(tasks).all_subtasks) == {"alpha", "beta"}
    assert blocked.read_text() == ""


def test_an_included_folder_is_merged_over_the_cached_one_as_lm_eval_merges_it(tasks, tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    task(mine, "gamma")
    task(mine, "beta")                                # overrides the cached folder's beta
    build(tasks)                                      # the cached folder's part on disk
    built = []

    def spy(paths, **kw):
        built.append([str(p) for p in paths])
        return LM_EVAL_BUILD(paths, **kw)

    monkeypatch.setattr(task_index, "_build", spy)
    got = TaskManager(include_path=[str(tasks), str(mine)], include_defaults=False)
    assert built == [[str(mine)]]                     # the cached folder read, the included one indexed
    want = LM_EVAL_BUILD([tasks, mine])               # lm-eval's own build of both
    assert index(got) == {name: str(entry.yaml_path) for name, entry in want.items()}
    assert index(got)["beta"] == str(mine / "beta.yaml")
