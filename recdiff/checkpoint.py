"""Load and save checkpoints in the Hugging Face layout their reference implementations write.

A folder (or hub repository) with ``config.json`` and ``*.safetensors`` holding the official parameter names
(``transformer.wte.weight``, ``transformer.prelude.0.attn.Wqkv.weight``, …; ``lm_head.weight`` absent when tied),
or a torch state dict (``pytorch_model.bin``, ``model.pt``: read with ``weights_only=True``, so no pickled
code runs, and refused unless it maps names to tensors), optionally with ``tokenizer.json``. Which model family it
is (:mod:`recdiff.families`) is recognised from the config and the weight names
(:func:`recdiff.recognition.recognise`). The Python files such a folder may carry (``auto_map`` in its config) are
never imported: recdiff's own code is the model.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from recdiff.errors import RecdiffError
from recdiff.families import config_json, from_checkpoint, to_checkpoint
from recdiff.model import RecurrentDepthModel
from recdiff.model_config import RecurrentConfig
from recdiff.recognition import recognise

HUGINN_HUB_ID = "tomg-group-umd/huginn-0125"
TORCH_FILES = ("pytorch_model.bin", "model.pt", "model.bin")  # torch state dicts, where no safetensors file is
_PREFIXES = ("module.", "_orig_mod.")  # what DDP and torch.compile put before a state dict's names
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """bf16 on GPU, float32 on CPU unless asked otherwise."""
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise RecdiffError(f"unknown dtype {dtype!r}; choose one of {', '.join(sorted(_DTYPES))}")
    return _DTYPES[dtype]


def resolve_checkpoint(path_or_hub_id: str | os.PathLike) -> Path:
    """A local folder as is; a hub id from the local HF cache or, when reachable, downloaded."""
    p = Path(path_or_hub_id).expanduser()
    if p.is_dir():
        return p
    name = str(path_or_hub_id)
    if not _HUB_ID.match(name):
        raise RecdiffError(f"checkpoint folder {name!r} does not exist (give a folder with config.json and "
                           f"*.safetensors, or a hub id like {HUGINN_HUB_ID})")
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", *TORCH_FILES, "tokenizer*"]
    try:
        return Path(snapshot_download(name, allow_patterns=patterns, local_files_only=True))
    except Exception:
        pass
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    try:
        return Path(snapshot_download(name, allow_patterns=patterns))
    except Exception as err:  # offline, unknown repo, gated, …: one line that says what to do instead
        raise RecdiffError(
            f"could not download {name!r} from the Hugging Face hub ({type(err).__name__}); download it where the hub "
            f"is reachable (huggingface-cli download {name} --local-dir DIR) and pass that folder instead "
            "(model.path=DIR, or recdiff.load_model('DIR'))"
        ) from None


def resolve_model_path(path: str) -> str:
    """A configured model path: a local folder (``recdiff/...`` = inside the installed package) or a hub id."""
    p = Path(os.path.expanduser(path))
    if p.exists():
        return str(p.resolve())
    if path.startswith("recdiff/"):
        packaged = Path(__file__).resolve().parent / path[len("recdiff/"):]
        if packaged.exists():
            return str(packaged)
        raise RecdiffError(f"model path not found: {path} (looked in {packaged})")
    looks_local = p.is_absolute() or path.startswith((".", "~")) or path.count("/") != 1
    if looks_local:
        raise RecdiffError(f"model path not found: {path}")
    return path  # "org/name": a hub id, resolved by load_model


def resolve_device(device: str) -> str:
    """``auto`` = CUDA when there is one; a CUDA device that is not there is one line."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RecdiffError(f"model.device={device} but no CUDA device is available (use model.device=cpu)")
    return device


def read_raw_config(folder: Path) -> dict[str, Any]:
    """``config.json`` as read, a mapping, or one line saying why not."""
    f = folder / "config.json"
    if not f.is_file():
        raise RecdiffError(f"{folder} has no config.json; is it a checkpoint folder in the Hugging Face layout?")
    try:
        raw = json.loads(f.read_text())
    except json.JSONDecodeError as err:
        raise RecdiffError(f"{f} is not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(raw, dict):
        raise RecdiffError(f"{f} holds a {type(raw).__name__}, not a mapping of settings")
    return raw


def weight_names(folder: Path) -> set[str]:
    """The tensor names of the checkpoint's weight files, read from their headers (no tensor is loaded; a torch
    file is mapped, not read)."""
    names: set[str] = set()
    for f in weight_files(folder):
        if f.suffix != ".safetensors":
            names.update(_torch_tensors(f))
            continue
        try:
            with safe_open(f, "pt") as h:
                names.update(h.keys())
        except Exception as err:  # SafetensorError, OSError
            raise _unreadable(f, err) from None
    return names


def read_config(folder: Path, family: str | None = None) -> RecurrentConfig:
    """The checkpoint's config in the model family it fits (or ``family``), from ``config.json`` and the weight
    names."""
    raw = read_raw_config(folder)
    return recognise(raw, weight_names(folder), str(folder), family)


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's safetensors files (a sharded checkpoint's index names them)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():  # sharded checkpoint: the index names the shard files
        try:
            files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise RecdiffError(f"{index} is not a safetensors index ({type(err).__name__}: {err})") from None
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise RecdiffError(f"{index} names {', '.join(missing[:3])}, which {folder} does not have")
    else:
        files = sorted(folder.glob("model*.safetensors"))
    if not files:
        files = [folder / name for name in TORCH_FILES if (folder / name).is_file()][:1]
    if not files:
        raise RecdiffError(f"{folder} has no model*.safetensors weights (nor {', '.join(TORCH_FILES)})")
    return files


def _torch_tensors(f: Path) -> dict[str, torch.Tensor]:
    """A torch state dict file's tensors (memory-mapped), by name without a DDP or compile prefix. Read with
    ``weights_only=True``: a pickle that names any code is refused before it runs; so is a file holding anything
    but a mapping of names to tensors."""
    try:
        obj = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # UnpicklingError (code in the pickle), RuntimeError (not a torch file), OSError
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RecdiffError(f"{f} is not a plain torch state dict (torch.load with weights_only=True refused it: "
                           f"{first[:200]})") from None
    if not isinstance(obj, dict) or not obj:
        raise RecdiffError(f"{f} holds a {type(obj).__name__}, not a mapping of tensor names to tensors")
    out: dict[str, torch.Tensor] = {}
    for name, t in obj.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise RecdiffError(f"{f} holds {type(t).__name__} under {name!r}: a weights file must hold tensors only")
        for prefix in _PREFIXES:
            name = name.removeprefix(prefix)
        out[name] = t
    return out


def _unreadable(f: Path, err: Exception) -> RecdiffError:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return RecdiffError(f"{f} is not a readable safetensors file (truncated or corrupt?): {first}")


def check_weight_files(folder: Path) -> None:
    """Each weight file's header, read without loading a tensor (it states every tensor's place, so a truncated or
    foreign file fails here): a sweep names such a file before it claims or records anything."""
    for f in weight_files(folder):
        if f.suffix != ".safetensors":
            _torch_tensors(f)
            continue
        try:
            with safe_open(f, "pt"):
                pass
        except Exception as err:  # SafetensorError, OSError
            raise _unreadable(f, err) from None


def _read_tensors(folder: Path, device: torch.device) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for f in weight_files(folder):
        if f.suffix != ".safetensors":
            tensors.update({k: v.to(device) for k, v in _torch_tensors(f).items()})
            continue
        try:
            tensors.update(load_file(f, device=str(device)))
        except Exception as err:  # SafetensorError (truncated or not safetensors), OSError: one line naming the file
            raise _unreadable(f, err) from None
    return tensors


def load_model(path_or_hub_id: str | os.PathLike, device: str | torch.device = "cpu",
               dtype: str | torch.dtype | None = None, compile: bool = False,
               family: str | None = None) -> RecurrentDepthModel:
    """Load a checkpoint (folder or hub id) of any model family → eval-mode model, with ``.tokenizer`` when present.

    ``family`` names the model family (:mod:`recdiff.families`) instead of recognising it; the folder must fit it.
    ``compile=True`` makes the engine compile its steps (CPU: ``torch.compile`` of P, R and C; CUDA: CUDA graphs of
    whole sampler steps, each layer's elementwise work fused); see :mod:`recdiff.engine.runner`."""
    folder = resolve_checkpoint(path_or_hub_id)
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RecdiffError("device 'cuda' requested but no CUDA device is available; use device=cpu")
    dt = resolve_dtype(dtype, device)
    if compile and device.type == "cpu":
        from recdiff.engine.program import internals

        internals()  # a torch too old for the CPU compile path: one line, before the weights load
    cfg = read_config(folder, family)  # the names fit the family's model (recognise), or one line says what does not
    tensors = from_checkpoint(cfg, _read_tensors(folder, device))
    with torch.device("meta"):
        model = RecurrentDepthModel(cfg)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        expected.pop("lm_head.weight")
        head = tensors.pop("lm_head.weight", None)  # a tied head stored twice must be the embedding itself
        wte = tensors.get("transformer.wte.weight")
        if head is not None and wte is not None and (head.shape != wte.shape or not torch.equal(head, wte)):
            raise RecdiffError(f"{folder}: the head is tied (tie_embeddings) but lm_head.weight differs from "
                               "transformer.wte.weight")
    tensors.pop("freqs_cis", None)  # the RoPE table is recomputed from the config
    for k, shape in expected.items():
        if tensors[k].shape != shape:
            raise RecdiffError(f"{folder}: tensor {k} has shape {tuple(tensors[k].shape)}, "
                               f"config.json implies {tuple(shape)}")
    model.load_state_dict({k: v.to(dt) for k, v in tensors.items()}, strict=False, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.transformer.wte.weight
    model.freqs_cis = model.rope_table(cfg.block_size, device)
    model.eval().requires_grad_(False)
    model.tokenizer = load_tokenizer(folder)
    model.source = str(path_or_hub_id)  # type: ignore[attr-defined]
    from recdiff.engine.runner import set_compile

    set_compile(model, compile)  # CUDA: fused kernels where Triton runs
    return model


def load_tokenizer(folder: Path) -> Any:
    if not (folder / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # AutoConfig does not know model_type huginn_raven and warns on every load
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # no tokenizer_config.json or an unknown tokenizer class: the raw tokenizer.json still works
        return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    finally:
        hf_logging.set_verbosity(level)


def save_pretrained(model: RecurrentDepthModel, folder: str | os.PathLike, tokenizer: Any = None) -> Path:
    """Write config.json + model.safetensors (official names, tied head omitted) [+ tokenizer files]."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        sd.pop("lm_head.weight", None)
    sd = to_checkpoint(model.config, sd)
    dtype = str(next(iter(sd.values())).dtype).removeprefix("torch.")
    cfg = {**config_json(model.config), "torch_dtype": dtype}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return out
