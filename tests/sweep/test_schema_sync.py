"""The sweep's typed schema, the samplers' own parameter specs and conf/sampler/*.yaml name the same keys with the
same defaults: a default changed in one place and not the others would make a study silently run something
other than what its config shows."""

from enum import Enum
from pathlib import Path

import pytest
import yaml

from recdiff import schema
from recdiff.samplers import adaptive, diffusion, speculative, static

SPECS = {"static": static.SPEC, "adaptive": adaptive.SPEC, "speculative": speculative.SPEC, "diffusion": diffusion.SPEC}
CONF = Path(__file__).resolve().parents[2] / "conf" / "sampler"


def _schema_defaults(name: str) -> dict:
    cls = schema.SAMPLER_SCHEMAS[name]
    out = {}
    for k, f in cls.__dataclass_fields__.items():
        if k == "name":
            continue
        v = f.default
        out[k] = v.value if isinstance(v, Enum) else v
    return out


@pytest.mark.parametrize("name", sorted(SPECS))
def test_schema_matches_sampler_spec(name):
    spec_defaults = {k: d for k, (d, _check) in SPECS[name].items()}
    assert _schema_defaults(name) == spec_defaults


@pytest.mark.parametrize("name", sorted(SPECS))
def test_conf_file_matches_schema(name):
    conf = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    conf = {k: v for k, v in conf.items() if k not in ("defaults", "name")}
    assert conf == _schema_defaults(name)
