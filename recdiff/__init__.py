"""recdiff: diffusion-forcing samplers for recurrent-depth language models, with sweeps and Pareto analysis."""

from recdiff.errors import RecdiffError
from recdiff.load import load_model, save_pretrained
from recdiff.samplers import SAMPLERS, GenerationResult, generate, sampler_spec
from recdiff.trace import DiffusionTrace

__all__ = ["RecdiffError", "load_model", "save_pretrained", "generate", "GenerationResult", "SAMPLERS",
           "sampler_spec", "DiffusionTrace"]
