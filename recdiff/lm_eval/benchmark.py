"""The sweep benchmark ``lm_eval``: an lm-evaluation-harness task as a trial's benchmark.

``python sweep.py -m benchmark=lm_eval benchmark.task=gsm8k_cot sampler.r_inner=1,2,4,8``

lm-eval builds the prompts (its templates, few-shot examples and, with ``use_chat``, chat template), recdiff decodes
them, and lm-eval scores the answers with the task's own filters, metrics and aggregation: both ends run through
``lm_eval.simple_evaluate`` (:func:`recdiff.lm_eval.tasks.run_task`), as ``lm_eval --samples`` would. The trial's
``accuracy`` is lm-eval's value of ``metric`` under ``filter`` (by default the task's first of each, as lm-eval's
table lists them first); each sample's ``correct`` says that metric is non-zero for it. Only generative tasks
(``generate_until``) measure a sampler; the study's identity holds the task's name and version.

Generation follows the task where a sweep has no setting of its own: each prompt stops at the task's ``until``
strings and at most at its ``max_gen_toks`` tokens (and ``run.max_new_tokens``); greedy or sampled decoding is
the sweep's (``run.temperature``), part of the study's identity.
"""

from __future__ import annotations

from typing import Any

from recdiff.benchmarks import Benchmark, Problem, Score, has_chat_template, register
from recdiff.errors import RecdiffError
from recdiff.lm_eval.tasks import StandIn, load_task, run_task


@register("lm_eval")
class LmEvalBenchmark(Benchmark):
    def __init__(self, *, task: str | None = None, include_path: str | None = None, n_shot: int | None = None,
                 metric: str | None = None, filter: str | None = None, use_chat: bool = False,
                 system_instruction: str | None = None, **options: Any) -> None:
        super().__init__(use_chat=use_chat, **options)
        if not task:
            raise RecdiffError("benchmark=lm_eval needs benchmark.task=<an lm-eval task name>")
        if n_shot is not None and (not isinstance(n_shot, int) or isinstance(n_shot, bool) or n_shot < 0):
            raise RecdiffError(f"lm_eval: n_shot must be an integer >= 0 or null, got {n_shot!r}")
        self.task_name, self.include_path, self.n_shot = str(task), include_path, n_shot
        self.task = load_task(self.task_name, include_path, self.path, output_type="generate_until")
        filters = [f["name"] for f in self.task.config.filter_list or []] or ["none"]
        metrics = [m["metric"] for m in self.task.config.metric_list or [] if isinstance(m.get("metric"), str)]
        for key, value, known in (("filter", filter, filters), ("metric", metric, metrics)):
            if value is not None and known and value not in known:
                raise RecdiffError(f"lm_eval: task {self.task_name!r} has no {key} {value!r} "
                                   f"(it has {', '.join(known)})")
        self.metric, self.filter, self.system_instruction = metric, filter, system_instruction
        self.version: Any = None
        self._chat: dict[int, dict[int, str]] = {}    # id(tokenizer) -> doc_id -> chat prompt

    # -- data -------------------------------------------------------------------------------------
    def _rows(self) -> tuple[list[dict], str]:
        source = f"lm-eval task {self.task_name}" + (f" on {self.path}" if self.path else "")
        return list(self.task.eval_docs), source

    def _problem(self, row: dict, index: int) -> Problem:
        return Problem(id=f"{self.task_name}/{index}", question="", reference=str(self.task.doc_to_target(row)),
                       meta={"doc_id": index})

    def problems(self) -> list[Problem]:
        """The slice, each problem with the prompt lm-eval builds for it and its generation arguments."""
        first = self._problems is None
        problems = super().problems()
        if first:
            ids = [p.meta["doc_id"] for p in problems]
            recorder = StandIn()
            result = run_task(self.task, ids, recorder, self.n_shot, system_instruction=self.system_instruction,
                              include_path=self.include_path)
            self.version = result["versions"].get(self.task_name)
            by_doc = {ids[r.doc_id]: r for r in recorder.requests}   # lm-eval numbers the selected docs 0, 1, ...
            stops = set()
            for p in problems:
                context, gen = by_doc[p.meta["doc_id"]].args
                until = gen.get("until") or []
                until = [until] if isinstance(until, str) else list(until)
                p.question = context
                p.meta.update(until=until, max_gen_toks=gen.get("max_gen_toks", gen.get("max_new_tokens")))
                stops.add(tuple(until))
            if len(stops) > 1:
                raise RecdiffError(f"lm-eval task {self.task_name!r} stops its documents at different strings; a sweep "
                                   "decodes a slice with one set of stop strings")
            self.stop_strings = list(stops.pop()) if stops else []
        return problems

    def identity(self) -> dict[str, Any]:
        """What the config does not say but the measurement depends on: the task's version."""
        self.problems()
        return {"task_version": self.version}

    def max_new_tokens(self, problem: Problem) -> int | None:
        return problem.meta.get("max_gen_toks")

    # -- prompting / scoring ----------------------------------------------------------------------
    def render(self, problem: Problem, tokenizer: Any = None) -> str:
        """lm-eval's prompt; with ``use_chat`` and a tokenizer with a chat template, lm-eval's chat prompt
        (``--apply_chat_template --fewshot_as_multiturn``, ``--system_instruction`` = ``system_instruction``)."""
        if not (self.use_chat and has_chat_template(tokenizer)):
            return problem.question
        if id(tokenizer) not in self._chat:
            ids = [p.meta["doc_id"] for p in self.problems()]
            recorder = StandIn(chat=lambda history: tokenizer.apply_chat_template(
                history, tokenize=False, add_generation_prompt=True),
                chat_name=str(getattr(tokenizer, "name_or_path", "")))
            run_task(self.task, ids, recorder, self.n_shot, chat=True, system_instruction=self.system_instruction,
                     include_path=self.include_path)
            self._chat[id(tokenizer)] = {ids[r.doc_id]: r.args[0] for r in recorder.requests}
        return self._chat[id(tokenizer)][problem.meta["doc_id"]]

    def score_all(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        """lm-eval's scores of the completions: per problem the chosen metric's value (``detail`` holds every
        metric under every filter), and lm-eval's aggregate in ``detail["aggregate"]``."""
        self._check_lengths(problems, completions)
        ids = [p.meta["doc_id"] for p in problems]
        if ids != sorted(ids):
            raise RecdiffError("lm_eval: problems must be scored in the order of the slice")
        result = run_task(self.task, ids, StandIn(answers=dict(enumerate(completions))), self.n_shot,
                          system_instruction=self.system_instruction, include_path=self.include_path)
        samples = result["samples"][self.task_name]
        metric, filt = self._metric(samples)
        aggregate = result["results"][self.task_name][f"{metric},{filt}"]
        per_doc: dict[int, dict[str, Any]] = {}
        for s in samples:
            d = per_doc.setdefault(int(s["doc_id"]), {})
            for m in s["metrics"]:
                d[f"{m},{s['filter']}"] = s[m]
            if s["filter"] == filt:
                d["extracted"] = s["filtered_resps"][0] if s["filtered_resps"] else None
        scores = []
        for doc_id in ids:
            d = per_doc[doc_id]
            value = d[f"{metric},{filt}"]
            extracted = d.pop("extracted", None)
            scores.append(Score(correct=bool(value), extracted=None if extracted is None else str(extracted),
                                detail={**d, "metric": f"{metric},{filt}", "aggregate": aggregate}))
        return scores

    def accuracy(self, scores: list[Score]) -> float:
        return float(scores[0].detail["aggregate"]) if scores else 0.0

    def _metric(self, samples: list[dict]) -> tuple[str, str]:
        """(metric, filter) recorded as accuracy: the options, else the first lm-eval reports."""
        filters = list(dict.fromkeys(s["filter"] for s in samples))
        metrics = list(dict.fromkeys(m for s in samples for m in s["metrics"]))
        filt = self.filter or filters[0]
        metric = self.metric or metrics[0]
        if filt not in filters:
            raise RecdiffError(f"lm_eval: task {self.task_name!r} has no filter {filt!r} (it has {', '.join(filters)})")
        if metric not in metrics:
            raise RecdiffError(f"lm_eval: task {self.task_name!r} has no metric {metric!r} "
                               f"(it has {', '.join(metrics)})")
        return metric, filt
