"""`mypy --strict` over a user's script that uses every verb of `Lake` and its report's fields, no casts;
and `help(delta_release.Lake)` documents every verb."""

from __future__ import annotations

import os
import pydoc
import subprocess
import sys
from pathlib import Path

import delta_release as dr


def main() -> None:  # the type of a plain function, to tell methods from the facade's other attributes
    """Nothing."""

ROOT = Path(__file__).resolve().parents[2]
VERBS = ("open", "create", "ingest", "replay", "scan", "read", "history", "erase", "rollback", "vacuum",
         "erasure_pending",
         "published", "recover_publication")


def test_user_script_type_checks_strictly() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the repo's .mypy_cache: warm after `make lint`
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict",
                          str(ROOT / "tests" / "typing" / "user_script.py")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_verb_is_typed_and_documented() -> None:
    text = pydoc.render_doc(dr.Lake, renderer=pydoc.plaintext)
    own = {n for n, v in vars(dr.Lake).items() if not n.startswith("_") and isinstance(v, (classmethod, type(main)))}
    for verb in sorted(own | set(VERBS)):  # every public method the facade defines, and the listed verbs
        fn = getattr(dr.Lake, verb)
        assert fn.__doc__ and fn.__doc__.strip(), verb
        assert verb in text
        hints = fn.__annotations__
        assert "return" in hints and "Any" not in str(hints["return"]), verb
        assert not any("Any" in str(v) for k, v in hints.items() if k != "return"), verb
