import os
import subprocess
import sys
import time

import pytest

from recdiff.benchmarks import get_benchmark
from recdiff.benchmarks.executor import Job, Limits, run, run_many
from recdiff.benchmarks.humaneval import package_rows, program
from recdiff.benchmarks.mbpp import extract_code, render_plain
from recdiff.benchmarks.selfcheck import HOSTILE, HOSTILE_LIMITS, WRONG_COMPLETIONS, leftovers, run_hostile

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="full isolation needs root (private uid)")


@pytest.mark.slow
def test_all_canonical_solutions_pass():
    bench = get_benchmark("humaneval")
    problems = bench.problems()
    assert len(problems) == 164
    t0 = time.monotonic()
    scores = bench.score_all(problems, [p.reference for p in problems])
    failed = [(p.id, s.detail["error"]) for p, s in zip(problems, scores) if not s.correct]
    assert failed == []
    print(f"164 canonical solutions in {time.monotonic() - t0:.1f} s")


def test_wrong_completions_fail():
    rows = {r["task_id"]: r for r in package_rows()}
    assert len(WRONG_COMPLETIONS) == 10
    bench = get_benchmark("humaneval")
    problems = [p for p in bench.problems() if p.id in WRONG_COMPLETIONS]
    scores = bench.score_all(problems, [WRONG_COMPLETIONS[p.id] for p in problems])
    assert [s.correct for s in scores] == [False] * 10
    assert all(s.detail["status"] == "failed" and "AssertionError" in s.detail["error"] for s in scores)
    # and the same bodies with the right fix pass, so the failures come from the bodies themselves
    assert program(rows["HumanEval/53"]["prompt"], "    return x + y\n```\ntrailing") == \
        rows["HumanEval/53"]["prompt"] + "    return x + y\n"


@pytest.mark.slow
@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_program_is_contained(hostile):
    if os.geteuid() != 0 and hostile.name in ("write outside the temporary directory", "delete files",
                                              "read environment secrets"):
        pytest.skip("only contained when run as root (private uid); see recdiff/benchmarks/README.md")
    ok, why = run_hostile(hostile)
    assert ok, why


@root_only
def test_signals_cannot_reach_the_host():
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        code = ("import os, posix, signal\n"
                "assert os.getuid() != 0\n"  # never run kill(-1) with privileges
                "for target in (posix.getppid(), %d, 1):\n"
                "    try:\n        posix.kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"
                "posix.kill(-1, signal.SIGKILL)\n" % sentinel.pid)
        r = run(Job(code), HOSTILE_LIMITS)
        assert r.isolation["private_uid"]
        assert sentinel.poll() is None and r.status in ("passed", "killed", "no_result")
        assert leftovers(r) == []
    finally:
        sentinel.kill()
        sentinel.wait()


@root_only
def test_private_uid_cannot_touch_host_files():
    import pathlib
    import shutil
    import tempfile

    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="recdiff-test-"))  # in /tmp, traversable by anyone
    os.chmod(tmp_path, 0o755)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.chmod(victim, 0o644)
    try:
        _try_to_touch(tmp_path, victim)
    finally:
        shutil.rmtree(tmp_path)


def _try_to_touch(tmp_path, victim):
    code = ("import posix\n"
            f"for f in (lambda: posix.chmod({str(victim)!r}, 0o777), lambda: posix.unlink({str(victim)!r}),\n"
            f"          lambda: open({str(tmp_path / 'new')!r}, 'w'), lambda: open('/root/.recdiff-pwned', 'w')):\n"
            "    try:\n        f(); print('DONE')\n    except OSError as e:\n        print('denied', e.errno)\n")
    r = run(Job(code), HOSTILE_LIMITS)
    assert r.stdout.splitlines() == ["denied 1", "denied 13", "denied 13", "denied 13"], r.stdout  # EPERM, EACCES
    assert victim.read_text() == "keep" and oct(victim.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(tmp_path)) == ["victim"] and not os.path.exists("/root/.recdiff-pwned")


@root_only
def test_no_network():
    r = run(Job("import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('1.1.1.1', 53))\n"), HOSTILE_LIMITS)
    assert r.isolation["net_isolated"] and r.status == "failed" and "OSError" in r.error


def test_cpu_limit_and_output_truncation():
    r = run(Job("import sys\nsys.stdout.write('y' * 100000)\n"), Limits(max_output_chars=100))
    assert r.passed and r.stdout.startswith("y" * 100) and r.stdout.endswith("[truncated]") and len(r.stdout) < 200
    r = run(Job("import posix\nposix.fork()\nwhile True:\n    pass\n"), Limits(timeout_s=1.5))
    assert r.status == "timeout" and leftovers(r) == []   # the forked child ended too (no wall bound: a loaded
    # machine may take its time; a child left spinning would show in leftovers)


def test_running_out_of_cpu_time_is_a_timeout():
    """The CPU-time limit backs up the wall clock and reports the same way, so an infinite loop ends as "timeout"
    whichever limit fires first (they raced on a loaded machine). The program lowers its own CPU limit to 1 s, with a
    wall-clock limit no loaded machine reaches before it has spent 1 s of CPU, so the CPU limit fires first."""
    code = ("import sys\ndel sys.modules['resource']\nimport resource\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (1, 3))\nwhile True:\n    pass\n")
    r = run(Job(code), Limits(timeout_s=600))
    assert r.status == "timeout" and "SIGXCPU" in r.error and leftovers(r) == []
    # a single-threaded program spends at most its wall time on the CPU: the wall clock fires before its CPU limit
    r = run(Job("while True:\n    pass\n"), Limits(timeout_s=1.5))
    assert r.status == "timeout" and r.error == "wall-clock timeout after 1.5 s"


def test_run_many_keeps_order():
    res = run_many([Job(f"assert {i} % 2 == 0") for i in range(6)], workers=2)
    assert [r.passed for r in res] == [True, False, True, False, True, False]


# ---- HumanEval / MBPP data and prompts -----------------------------------------------------------

def test_humaneval_local_file_and_prompt_golden(write_jsonl, chat_tokenizer):
    row = {"task_id": "HumanEval/999", "prompt": "def f(x):\n    \"\"\"Double x.\"\"\"\n",
           "canonical_solution": "    return 2 * x\n", "test": "def check(candidate):\n    assert candidate(2) == 4\n",
           "entry_point": "f"}
    bench = get_benchmark("humaneval", path=str(write_jsonl("he.jsonl", [row])))
    (p,) = bench.problems()
    assert p.id == "HumanEval/999"
    user = ("Write a solution to the following problem and make sure that it passes the tests:\n```python\n"
            "def f(x):\n    \"\"\"Double x.\"\"\"\n\n```\n")
    prefix = "Here is the completed function:\n```python\ndef f(x):\n    \"\"\"Double x.\"\"\"\n\n"
    assert bench.render(p, chat_tokenizer) == f"<|user|>{user}<|end|><|assistant|>" + prefix
    assert bench.render(p, None) == user + prefix
    ok, bad = bench.score_all([p, p], ["    return 2 * x\n```\nExplanation: doubles.", "    return x\n"])
    assert ok.correct and not bad.correct


MBPP_ROW = {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character "
                                   "from the string.",
            "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
                    "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n"
                    "    for i in range(len(s) - 1,-1,-1):  \r\n        if (s[i] == ch): \r\n"
                    "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
            "test_list": ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"',
                          'assert remove_Occ("PHP","P") == "H"'],
            "test_setup_code": "", "challenge_test_list": []}


def test_mbpp_local_file_scoring_and_prompt(write_jsonl, chat_tokenizer):
    bench = get_benchmark("mbpp", path=str(write_jsonl("mbpp.jsonl", [MBPP_ROW])))
    (p,) = bench.problems()
    assert p.id == "mbpp/11"
    good = "\n" + MBPP_ROW["code"] + "\n[DONE]\n\nYou are an expert"
    fenced = "Sure:\n```python\n" + MBPP_ROW["code"] + "\n```\n[DONE]"
    wrong = "\ndef remove_Occ(s, ch):\n    return s[1:-1]\n[DONE]"
    assert [s.correct for s in bench.score_all([p] * 3, [good, fenced, wrong])] == [True, True, False]
    assert extract_code("```python\nx = 1\n```") == "x = 1"
    text = render_plain(p.question, p.meta["test_list"], n_shot=1)
    assert text == (
        "You are an expert Python programmer, and here is your task: Write a function to find the similar "
        "elements from the given two tuple lists. Your code should pass these tests:\n\n"
        "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)\n"
        "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)\n"
        "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)\n[BEGIN]\n"
        "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n"
        "  return (res) \n[DONE]\n\n"
        "You are an expert Python programmer, and here is your task: " + MBPP_ROW["text"] +
        " Your code should pass these tests:\n\n" + "\n".join(MBPP_ROW["test_list"]) + "\n[BEGIN]")
    chat = get_benchmark("mbpp", path=str(write_jsonl("mbpp.jsonl", [MBPP_ROW])), n_shot=1).render(p, chat_tokenizer)
    assert chat.startswith("<|user|>You are an expert") and chat.endswith("[BEGIN]<|end|><|assistant|>")
    assert "[DONE]<|end|><|user|>" in chat and bench.stop_strings[0] == "[DONE]"
