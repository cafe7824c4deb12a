"""Adversarial review of stop 49's changes.

* Read-only release metadata: the ``TypeError`` of an edit advised "dict(release.metadata)
  (or copy.deepcopy)" for an editable copy, but ``copy.deepcopy`` of a ``MetadataDict`` is
  another read-only ``MetadataDict`` (its ``__reduce__`` rebuilds the type), and
  ``dict(...)`` leaves the nested lists and dicts read-only.  The message now names
  ``plain_metadata``, which is editable throughout.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from pm_dpgp.release import MetadataDict, plain_metadata
from tests.releases import label_release


@pytest.fixture(scope="module")
def cloaking(small_gp):
    return label_release("cloaking", small_gp)


def test_the_read_only_message_advises_a_copy_that_is_editable(cloaking) -> None:
    md = cloaking.metadata
    with pytest.raises(TypeError, match="read-only") as info:
        md["epsilon"] = 0.0
    message = str(info.value)
    # copy.deepcopy gives another read-only mapping: it must not be offered as the way out
    deep = copy.deepcopy(md)
    assert isinstance(deep, MetadataDict)
    with pytest.raises(TypeError, match="read-only"):
        deep["epsilon"] = 0.0
    assert "(or copy.deepcopy)" not in message
    # the advised copy is editable at every level, and equal to the metadata
    assert "plain_metadata" in message
    editable = plain_metadata(md)
    assert editable == md and json.dumps(editable) == json.dumps(md)
    editable["epsilon"] = 0.0
    editable["privacy_event"]["epsilon"] = 0.0
    editable["clipping_bounds"].append(1.0)
    assert md["epsilon"] != 0.0 and md["privacy_event"].get("epsilon") != 0.0
    assert len(md["clipping_bounds"]) == 2
    assert np.isfinite(cloaking.metadata["epsilon"])
