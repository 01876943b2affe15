"""The lm-eval model ``recdiff``: a recdiff checkpoint decoded by any of its samplers.

```
python -m recdiff.lm_eval --model recdiff \\
    --model_args pretrained=DIR,sampler=diffusion,r_inner=4,epsilon=0.03,batch_size=32 --tasks gsm8k_cot
```

``model_args``: ``pretrained`` (folder or hub id; ``recdiff/...`` inside the package), ``sampler`` (static, adaptive,
speculative, diffusion, loopspec), the sampler's parameters by their recdiff names (``r``, ``r_inner``, ``epsilon``,
``r_draft``, ...; checked as ``recdiff.generate`` checks them, one line for a wrong name, type or value; ``null`` or
``none`` for an unset one, ``r_draft2=null``), ``batch_size`` (sequences decoded side
by side; wins over lm-eval's ``--batch_size``), ``device``, ``dtype``, ``compile``, ``seed`` (for sampling) and
``stats_file``.

- ``generate_until``: the requests go through recdiff's batched engine, grouped by their generation arguments; each
  honours its own ``until`` strings (plus the tokenizer's EOS, as lm-eval's Hugging Face backend does) and
  ``max_gen_toks``. Greedy unless the request sets ``do_sample``.
- ``loglikelihood`` / ``loglikelihood_rolling``: one forward pass at the sampler's ``r`` (its default when not given),
  so multiple-choice and perplexity tasks run too.
- Per-request sampler statistics (core passes, steps, new tokens, seconds in the batch, tokens/s) are appended to a
  JSON-lines side file, ``stats_file`` (default ``outputs/lm_eval/stats-<time>.jsonl``), one line per request with
  its task and ``doc_id``; lm-eval's results name the file (``config.recdiff_stats_file``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import lm_eval.models  # noqa: F401  (lm-eval's own names first: it loads them only into an empty registry)
import torch
import torch.nn.functional as F
from lm_eval import utils
from lm_eval.api.instance import Instance
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tqdm.auto import tqdm

from recdiff.errors import RecdiffError

log = logging.getLogger("recdiff.lm_eval")

# generation arguments of lm-eval requests that recdiff's samplers honour
GENERATION_KEYS = ("until", "max_gen_toks", "max_new_tokens", "do_sample", "temperature", "top_p")


def _merged(model_args: dict[str, Any], cli: dict[str, Any] | None) -> dict[str, Any]:
    """lm-eval's ``--batch_size`` / ``--device`` (always sent, with defaults) under the explicit ``model_args``. Its
    default device ``cuda:0`` is dropped on a machine without CUDA (recdiff picks the device); a CUDA device asked for
    in ``model_args`` is an error there."""
    extra = {k: v for k, v in (cli or {}).items() if v is not None and k not in model_args}
    if str(extra.get("device", "")).startswith("cuda") and not torch.cuda.is_available():
        extra.pop("device")
    return {**extra, **model_args}


@register_model("recdiff")
class RecdiffLM(TemplateLM):
    def __init__(self, pretrained: str = "recdiff/assets/embedded", sampler: str = "static", device: str = "auto",
                 dtype: str | None = None, batch_size: int | str | None = None, max_batch_size: int | None = None,
                 compile: bool = False, seed: int = 0, stats_file: str | None = None, family: str | None = None,
                 **params: Any) -> None:
        super().__init__()
        import recdiff
        from recdiff.checkpoint import resolve_device, resolve_model_path
        from recdiff.samplers import check_params

        # lm-eval reads "none" as None; "null", as a sweep and a preset write it, is None too
        params = {k: None if isinstance(v, str) and v.lower() == "null" else v for k, v in params.items()}
        try:
            self.params = check_params(str(sampler), params)
        except RecdiffError as err:
            raise RecdiffError(f"lm-eval model_args: {err}") from None
        self.sampler = str(sampler)
        self.given = dict(params)    # passed to generate as given: the sampler fills its own defaults
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise RecdiffError(f"lm-eval model_args: seed={seed!r} must be an integer")
        self.seed = seed
        self.batch_size = _batch_size(batch_size)
        self._device = torch.device(resolve_device(str(device)))
        self.model = recdiff.load_model(resolve_model_path(str(pretrained)), device=self._device, dtype=dtype,
                                        compile=_flag(compile, "lm-eval model_args: compile"),
                                        family=None if family is None else str(family))
        self.tokenizer = self.model.tokenizer
        if self.tokenizer is None:
            raise RecdiffError(f"lm-eval model_args: {pretrained} has no tokenizer.json; lm-eval feeds text")
        self.pretrained = str(pretrained)
        self.r = int(self.params.r)                # the recurrence every loglikelihood is scored at
        self.max_gen_toks = 256                    # lm-eval's default when a request names none
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.stats_file = Path(stats_file or f"outputs/lm_eval/stats-{stamp}-{os.getpid()}.jsonl").resolve()

    # ---------------------------------------------------------------------------------------- construction
    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "RecdiffLM":
        return cls(**_merged(utils.simple_parse_args_string(arg_string), additional_config))

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "RecdiffLM":
        return cls(**_merged(dict(arg_dict), additional_config))

    # ---------------------------------------------------------------------------------------- tokenizer
    @property
    def eot_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def prefix_token_id(self) -> int:
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return int(bos) if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        return int(self.model.config.block_size)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """``add_special_tokens=None``: as a sweep encodes a prompt (:func:`recdiff.tokenizer.encode_prompt`)."""
        from recdiff.tokenizer import encode_prompt

        if add_special_tokens is None:
            return encode_prompt(self.tokenizer, string)
        return list(self.tokenizer.encode(string, add_special_tokens=add_special_tokens))

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    @property
    def tokenizer_name(self) -> str:
        return self.pretrained.replace("/", "__")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        """Merged into lm-eval's ``results["config"]``: what decoded the answers and where their statistics are."""
        return {"recdiff_sampler": self.sampler, "recdiff_params": self.params.values(),
                "recdiff_loglikelihood_r": self.r, "recdiff_stats_file": str(self.stats_file)}

    # ---------------------------------------------------------------------------------------- generation
    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        import recdiff

        outputs: list[str | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        settings = [self._generation(req.args[1]) for req in requests]
        for i, s in enumerate(settings):
            groups[(s["until"], s["temperature"], s["top_p"])].append(i)
        bar = tqdm(total=len(requests), desc=f"recdiff {self.sampler}", disable=disable_tqdm)
        lines = []
        for (until, temperature, top_p), idx in groups.items():
            prompts, limits = [], []
            for i in idx:
                ids, limit = self._fit(self.tok_encode(requests[i].args[0]), settings[i]["max_gen_toks"])
                prompts.append(ids)
                limits.append(limit)
            results = recdiff.generate(self.model, prompts, sampler=self.sampler, max_new_tokens=limits,
                                       seed=self.seed, temperature=temperature, top_p=top_p,
                                       stop_strings=list(until), batch_size=self.batch_size, progress=bar.update,
                                       **self.given)
            for i, res in zip(idx, results):
                text = _cut(self.tok_decode(list(res.tokens)), [*until, self._eos_text()])
                outputs[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
                lines.append(self._stats_line(requests[i], res, len(prompts)))
        bar.close()
        self._write_stats(lines)
        return outputs  # type: ignore[return-value]

    def _generation(self, kwargs: Any) -> dict[str, Any]:
        """A request's generation arguments → (until, max_gen_toks, temperature, top_p); one line for what recdiff's
        samplers cannot honour."""
        kw = dict(kwargs or {})
        unknown = sorted(k for k in kw if k not in GENERATION_KEYS and not (k == "num_beams" and kw[k] == 1))
        if unknown:
            raise RecdiffError(f"generation argument(s) {', '.join(unknown)} not supported by recdiff's samplers "
                               f"(supported: {', '.join(GENERATION_KEYS)})")
        until = kw.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        if not all(isinstance(u, str) for u in until):
            raise RecdiffError(f"generation argument until={kw.get('until')!r} must be a string or a list of strings")
        limit = kw.get("max_gen_toks", kw.get("max_new_tokens", self.max_gen_toks))
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise RecdiffError(f"generation argument max_gen_toks={limit!r} must be an integer >= 1")
        sample = _flag(kw.get("do_sample", False), "generation argument do_sample")
        temperature = float(kw.get("temperature", 1.0)) if sample else 0.0
        top_p = float(kw.get("top_p", 1.0)) if sample else 1.0
        return {"until": tuple(until), "max_gen_toks": limit, "temperature": temperature, "top_p": top_p}

    def _fit(self, ids: list[int], max_gen_toks: int) -> tuple[list[int], int]:
        """The prompt and its answer limit within the model's context: the answer is cut to the room left, and a
        prompt that leaves none loses its start (as lm-eval's Hugging Face backend does), keeping room for
        ``min(max_gen_toks, block_size // 2)`` new tokens."""
        room = self.max_length - 1 - len(ids)
        if room < 1:
            keep = self.max_length - 1 - min(max_gen_toks, self.max_length // 2)
            log.warning("prompt of %d tokens left-truncated to %d (block_size %d)", len(ids), keep, self.max_length)
            ids = ids[-keep:]
            room = self.max_length - 1 - len(ids)
        return ids, min(max_gen_toks, room)

    def _eos_text(self) -> str:
        return self.tokenizer.decode([self.eot_token_id])

    def _stats_line(self, req: Instance, res: Any, group: int) -> dict[str, Any]:
        new = int(res.stats.get("new_tokens", len(res.tokens)))
        seconds = res.time_s
        return {"task": req.task_name, "doc_id": req.doc_id, "request": "generate_until", "sampler": self.sampler,
                "new_tokens": new, "core_passes": int(res.stats.get("core_passes", 0)),
                "steps": int(res.stats.get("steps", 0)), "tokens_forward": res.stats.get("tokens_forward"),
                "stopped_by": res.stopped_by, "time_s": seconds,
                "tokens_per_s": new / seconds if seconds else None, "batch_size": min(self.batch_size, group)}

    def _write_stats(self, lines: list[dict[str, Any]]) -> None:
        self.stats_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stats_file, "a") as fh:
            for line in lines:
                fh.write(json.dumps(line, default=str) + "\n")
        log.info("recdiff: per-request sampler statistics of %d requests appended to %s", len(lines), self.stats_file)

    # ---------------------------------------------------------------------------------------- scoring
    def _loglikelihood_tokens(self, requests: list[tuple[Any, list[int], list[int]]], disable_tqdm: bool = False,
                              override_bs: int | None = None) -> list[tuple[float, bool]]:
        """(sum of log-probabilities of the continuation, whether greedy decoding gives it) per request, from one
        no-cache forward pass at recurrence ``r``; the sequence keeps its last ``block_size + 1`` tokens."""
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: -(len(requests[i][1]) + len(requests[i][2])))
        size = override_bs or self.batch_size
        gen = torch.Generator(device=self._device).manual_seed(self.seed)
        bar = tqdm(total=len(requests), desc=f"recdiff loglikelihood r={self.r}", disable=disable_tqdm)
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            rows = []
            for i in chunk:
                _, context, continuation = requests[i]
                whole = (list(context) + list(continuation))[-(self.max_length + 1):]
                n = min(len(continuation), len(whole) - 1)
                rows.append((whole[:-1], whole[len(whole) - n:]))
            width = max(len(inp) for inp, _ in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long, device=self._device)
            for b, (inp, _) in enumerate(rows):   # right-padded: causal attention keeps pads out of real positions
                ids[b, :len(inp)] = torch.tensor(inp, device=self._device)
            with torch.inference_mode():
                logits, _ = self.model(ids, self.r, float(self.params.init_scale), gen)
                logp = F.log_softmax(logits.float(), dim=-1)
            for b, (i, (inp, target)) in enumerate(zip(chunk, rows)):
                n = len(target)
                rows_logp = logp[b, len(inp) - n:len(inp)]                      # (n, V): predictions of target
                tgt = torch.tensor(target, device=self._device)
                score = float(rows_logp.gather(-1, tgt[:, None]).sum())
                greedy = bool((rows_logp.argmax(-1) == tgt).all())
                out[i] = (score, greedy)
                self.cache_hook.add_partial("loglikelihood", requests[i][0], (score, greedy))
            bar.update(len(chunk))
        bar.close()
        return out  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole text, in disjoint windows of the model's context (lm-eval's rolling windows,
        each window conditioned on the one token before it)."""
        windows, owner = [], []
        for i, req in enumerate(requests):
            (text,) = req.args
            for ctx, pred in map(utils.make_disjoint_window,
                                 utils.get_rolling_token_windows(token_list=self.tok_encode(text),
                                                                 prefix_token=self.prefix_token_id,
                                                                 max_seq_len=self.max_length, context_len=1)):
                windows.append((None, ctx, pred))
                owner.append(i)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for i, (score, _) in zip(owner, scores):
            totals[i] += score
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals


def _cut(text: str, stops: list[str]) -> str:
    """The text before the first stop string (lm-eval's contract for ``generate_until``)."""
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text if cut < 0 else text[:cut]


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    raise RecdiffError(f"{what}={value!r} must be true or false")


def _batch_size(value: Any) -> int:
    """An integer >= 1; lm-eval's ``auto`` (and ``auto:N``) and None mean recdiff's default (32)."""
    from recdiff.samplers import default_batch_size

    if value is None or (isinstance(value, str) and value.startswith("auto")):
        return default_batch_size(torch.device("cpu"))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise RecdiffError(f"lm-eval model_args: batch_size={value!r} must be an integer >= 1 or auto")
