"""Minerva Math (MATH, ``EleutherAI/hendrycks_math``, 7 subject configs, split ``test``), 4-shot.

Format followed: lm-evaluation-harness ``minerva_math_*`` (the "updated" Minerva format): each example
is ``Problem:\\n<problem>\\n\\nSolution: <solution>`` with solutions ending in
``Final Answer: The final answer is $X$. I hope it is correct.``, examples joined by a blank line, the
query ends with ``Solution:``, generation stops at ``Problem:``.  The 4 exemplars are the Minerva
prompt (Lewkowycz et al. 2022) as lm-eval ships it.  With a chat template the examples are user /
assistant turns (lm-eval ``--apply_chat_template --fewshot_as_multiturn``), no system prompt by default.
Graded with math-verify against the last ``\\boxed{}`` of the reference solution (wrapped in ``$...$``).
"""

from __future__ import annotations

from typing import Any

from recdiff.benchmarks import Benchmark, Problem, Score, apply_chat, has_chat_template
from recdiff.benchmarks.data import load_rows, local_file, read_local
from recdiff.errors import RecdiffError

# hub config name -> value of the dataset's ``type`` field (used to filter one local file)
SUBJECTS: dict[str, str] = {
    "algebra": "Algebra",
    "counting_and_probability": "Counting & Probability",
    "geometry": "Geometry",
    "intermediate_algebra": "Intermediate Algebra",
    "number_theory": "Number Theory",
    "prealgebra": "Prealgebra",
    "precalculus": "Precalculus",
}

EXEMPLARS: list[tuple[str, str]] = [
    ("Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.}",
     "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so $x\\ge2$, "
     "and $5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, which "
     "gives $x<5$. Therefore, the domain of the expression is $\\boxed{[2,5)}$.\n"
     "Final Answer: The final answer is $[2,5)$. I hope it is correct."),
    ("If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = (2)(12) = "
     "\\boxed{24}.$\nFinal Answer: The final answer is $24$. I hope it is correct."),
    ("Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, how "
     "many times must Terrell lift them in order to lift the same total weight?",
     "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ pounds "
     "of weight.  If he lifts two 15-pound weights instead for $n$ times, he will lift a total of "
     "$2\\cdot15\\cdot n=30n$ pounds of weight.  Equating this to 480 pounds, we can solve for $n$:\n"
     "\\begin{align*}\n30n&=480\\\\\n\\Rightarrow\\qquad n&=480/30=\\boxed{16}\n\\end{align*}\n"
     "Final Answer: The final answer is $16$. I hope it is correct."),
    ("If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\\\n6y-9x &=b.\n\\end{align*}has a "
     "solution $(x, y)$ where $x$ and $y$ are both nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is nonzero.",
     "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$Since we "
     "also know that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\n"
     "Final Answer: The final answer is $-\\frac{2}{3}$. I hope it is correct."),
]

STOP_STRINGS = ["Problem:", "</s>", "<|im_end|>", "<|end_turn|>"]


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched; ``\\boxed x`` form too."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    rest = text[idx:]
    if rest.startswith("\\boxed "):
        return rest[len("\\boxed "):].split("$")[0].strip()
    start = rest.find("{")
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(rest)):
        depth += {"{": 1, "}": -1}.get(rest[i], 0)
        if depth == 0:
            return rest[start + 1:i]
    return None


def user_turn(problem: str) -> str:
    return f"Problem:\n{problem}\n\nSolution:"


def render_plain(problem: str, n_shot: int = 4) -> str:
    return "".join(f"{user_turn(p)} {s}\n\n" for p, s in EXEMPLARS[:n_shot]) + user_turn(problem)


def chat_messages(problem: str, n_shot: int = 4, system_prompt: str | None = None) -> list[dict]:
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for p, s in EXEMPLARS[:n_shot]:
        msgs += [{"role": "user", "content": user_turn(p)}, {"role": "assistant", "content": s}]
    return msgs + [{"role": "user", "content": user_turn(problem)}]


class MinervaMath(Benchmark):
    """Local files need ``problem``, ``solution`` and ``type`` (the subject, e.g. ``Number Theory``)."""

    name = "minerva_math"
    dataset_id = "EleutherAI/hendrycks_math"
    stop_strings = STOP_STRINGS

    def __init__(self, *, split: str = "test", subjects: list[str] | None = None, n_shot: int = 4,
                 system_prompt: str | None = None, **options: Any):
        super().__init__(**options)
        subjects = list(subjects) if subjects else list(SUBJECTS)
        unknown = [s for s in subjects if s not in SUBJECTS]
        if unknown:
            raise RecdiffError(f"{self.name}: unknown subject(s) {unknown}; choose from {', '.join(SUBJECTS)}")
        if not 0 <= int(n_shot) <= len(EXEMPLARS):
            raise RecdiffError(f"{self.name}: n_shot must be in 0..{len(EXEMPLARS)}, got {n_shot}")
        self.split, self.subjects, self.n_shot, self.system_prompt = split, subjects, int(n_shot), system_prompt

    def _rows(self) -> tuple[list[dict], str]:
        local = local_file(self.name, self.path)
        if local is not None:
            wanted = {SUBJECTS[s] for s in self.subjects}
            by_type = {v: k for k, v in SUBJECTS.items()}
            rows, seen = [], {s: 0 for s in SUBJECTS}
            for r in read_local(local, ("problem", "solution", "type")):
                if r.get("type") in wanted:
                    subj = by_type[r["type"]]
                    rows.append(dict(r, _subject=subj, _index=seen[subj]))
                    seen[subj] += 1
            return rows, str(local)
        rows = []
        for s in self.subjects:  # subjects in a fixed order, each in dataset order
            rows += [dict(r, _subject=s, _index=i)
                     for i, r in enumerate(load_rows(self.name, None, self.dataset_id, s, self.split)[0])]
        return rows, f"hf:{self.dataset_id}/{','.join(self.subjects)}/{self.split}"

    def _problem(self, row: dict, index: int) -> Problem:
        answer = last_boxed(row["solution"])
        return Problem(id=f"{self.name}/{row['_subject']}/{row['_index']}", question=row["problem"],
                       reference=answer if answer is not None else "",
                       meta={"subject": row["_subject"], "level": row.get("level"), "solution": row["solution"]})

    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        if self.use_chat and has_chat_template(tokenizer):
            return apply_chat(tokenizer, chat_messages(problem.question, self.n_shot, self.system_prompt))
        return render_plain(problem.question, self.n_shot)

    def score_all(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        from recdiff.benchmarks.mathgrade import grade

        self._check_lengths(problems, completions)
        return grade([p.reference for p in problems], completions, self.workers)
