"""Every registered engine equals its plain reference loop, as Scores, on the tiny model of every family, on
whichever TransformerLens line this environment has (``tests/backends`` runs on both; the 3.9 twin with every family
is ``tests/unit/test_engine_registry.py``). A new entry in :data:`circuits.patching.engines.registry.ENGINES` is tested by
being added."""

from __future__ import annotations

import pytest
from helpers import BACKEND_FAMILIES, check_engine_against_reference

from circuits.patching.engines.registry import ENGINES


@pytest.mark.parametrize("arch", BACKEND_FAMILIES)
@pytest.mark.parametrize("name", list(ENGINES))
def test_engine_equals_its_reference(family_models, tokenizer, name, arch):
    check_engine_against_reference(family_models(arch), tokenizer, name)
