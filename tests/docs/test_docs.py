"""The README and the documentation site: the README fits a screen and its generated table is current, every
`trl_ext` name written in the docs resolves, the site lists every config, policy loss and estimator from the
registries, and no page lists registered names in a table typed by hand. (`.ci/run` builds the site itself with
`mkdocs build --strict`.)"""

from __future__ import annotations

import glob
import importlib
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "docs", "_hooks"))

import registry_tables  # noqa: E402  (docs/_hooks: the site's MkDocs hook)

from trl_ext import ALGORITHMS  # noqa: E402
from trl_ext.advantages import ADVANTAGE_FNS  # noqa: E402
from trl_ext.losses import POLICY_LOSSES  # noqa: E402

PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
README = os.path.join(ROOT, "README.md")
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.py"), recursive=True))

# Names the extending page's own example creates (`register_algorithm` of its `capped_pg` record).
CREATED_BY_THE_EXTENDING_EXAMPLE = {"trl_ext.CappedPGConfig", "trl_ext.CappedPGTrainer"}


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _rendered_site() -> dict[str, str]:
    """Every page's Markdown with its registry directives expanded, as the site's hook renders it."""
    return {os.path.relpath(p, ROOT): registry_tables.expand(_read(p)) for p in PAGES}


def test_readme_fits_a_screen_and_has_the_quickstart():
    text = _read(README)
    assert len(text.splitlines()) <= 200
    quickstart = text.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quickstart.strip().splitlines()]
    assert commands == [
        'pip install torch==2.13.0 -e ".[dev]"',
        "accelerate launch examples/train_sapo.py",
        "python -m pytest -q -n 2 tests",
    ]


def test_readme_table_is_generated_from_the_registry_and_current():
    text = _read(README)
    assert registry_tables.refresh_blocks(text) == text, "run python docs/_hooks/registry_tables.py"
    block = text.split("<!-- registry: algorithms-short -->", 1)[1].split(registry_tables.END, 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [
        spec.name for spec in registry_tables._by_family(ALGORITHMS.values())
    ]
    stale = text.replace(rows[0] + "\n", "")  # a row dropped by hand is put back
    assert registry_tables.refresh_blocks(stale) == text


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_trl_ext_name_written_in_the_docs_resolves():
    names: dict[str, set[str]] = {}
    for path in [README, *PAGES, *EXAMPLES]:
        for name in re.findall(r"\btrl_ext(?:\.[A-Za-z_]\w*)+", _read(path)):
            names.setdefault(name.rstrip("."), set()).add(os.path.relpath(path, ROOT))
    assert len(names) > 50  # the reference pages alone name every loss module
    unresolved = {
        n: sorted(p) for n, p in names.items() if n not in CREATED_BY_THE_EXTENDING_EXAMPLE and not _resolves(n)
    }
    assert not unresolved
    assert not _resolves("trl_ext.losses.no_such_loss")  # the check can fail


def test_the_site_shows_every_config_policy_loss_and_estimator():
    site = "\n".join(_rendered_site().values())
    for spec in ALGORITHMS.values():
        assert f"::: {spec.config_class.__module__}.{spec.config_class.__name__}" in site, spec.name
        assert f"<!-- registry: settings {spec.name} -->" in "\n".join(map(_read, PAGES)), spec.name
    for name in POLICY_LOSSES:
        assert f"| `{name}` | [`{POLICY_LOSSES[name].__name__}`]" in site, name
    for name in ADVANTAGE_FNS:
        assert f"| `{name}` | `{ADVANTAGE_FNS[name].__module__}." in site, name


def test_no_page_types_a_table_of_registered_names():
    """A table whose rows start with registered names is rendered from the registry, never typed: three or more such
    rows in a page's source are a hand-typed copy that will drift."""
    registered = set(ALGORITHMS) | set(POLICY_LOSSES) | set(ADVANTAGE_FNS)
    for path in [README, *PAGES]:
        source = registry_tables.refresh_blocks(_read(path)).split("\n")
        generated = False
        typed = []
        for line in source:  # README blocks between a directive and its end are generated
            generated = (generated or line.startswith("<!-- registry:")) and line != registry_tables.END
            match = re.match(r"^\| `([\w-]+)`", line)
            if match and match[1] in registered and not generated:
                typed.append(match[1])
        assert len(typed) < 3, f"{os.path.relpath(path, ROOT)} types a table of registered names: {typed}"


def test_a_directive_renders_the_registry_and_an_unknown_one_is_refused_by_name():
    table = registry_tables.render("settings", "sapo")
    assert "| `tau_neg` | `1.05` |" in table and "| `tau_pos` | `1.0` |" in table
    verl = registry_tables.render("algorithms", "group=verl")
    assert "`gpg`" in verl and "`sapo`" not in verl
    with pytest.raises(ValueError, match=r"unknown registry directive 'setings' \(did you mean settings\?\)"):
        registry_tables.render("setings", "sapo")
