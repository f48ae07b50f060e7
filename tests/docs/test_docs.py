"""The README and the documentation site: the README fits a screen, every generated block in the README and the pages
is current, every `trl_ext` name written in the docs resolves, the site lists every config, policy loss and estimator
from the registries, and no page lists registered names in a table typed by hand. (`.ci/run` builds the site itself
with `mkdocs build --strict`.)"""

from __future__ import annotations

import glob
import importlib
import logging
import os
import re
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "docs", "_hooks"))

import inline_code  # noqa: E402  (docs/_hooks: the site's MkDocs hooks)
import registry_tables  # noqa: E402

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


def _site() -> dict[str, str]:
    """Every page's Markdown: the site shows each as its file holds it, generated blocks included."""
    return {os.path.relpath(p, ROOT): _read(p) for p in PAGES}


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
    block = text.split("<!-- registry: algorithms-short -->", 1)[1].split(registry_tables.END, 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [
        spec.name for spec in registry_tables._by_family(ALGORITHMS.values())
    ]


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: os.path.relpath(p, ROOT))
def test_every_generated_block_is_current(path):
    """Each directive's block (README and pages) is what the registries render now, for that file's location."""
    text = _read(path)
    assert registry_tables.refresh_blocks(text, registry_tables.base_for(path)) == text, (
        "run python docs/_hooks/registry_tables.py"
    )


def test_a_block_edited_by_hand_or_missing_is_found_and_written_anew(tmp_path, capsys):
    """`--check` names the file whose block was edited by hand or not yet written; a run writes it back."""
    page = os.path.join(ROOT, "docs", "algorithms", "index.md")
    (tmp_path / "docs" / "algorithms").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# README\n\n<!-- registry: recipes -->\n", encoding="utf-8")
    copy = tmp_path / "docs" / "algorithms" / "index.md"
    current = _read(page)
    row = next(line for line in current.splitlines() if line.startswith("| `sapo` |"))
    copy.write_text(current.replace(row + "\n", ""), encoding="utf-8")  # a row dropped by hand
    assert registry_tables.main(["--check"], root=str(tmp_path)) == 1
    assert "README.md, docs/algorithms/index.md" in capsys.readouterr().out
    assert registry_tables.main([], root=str(tmp_path)) == 0
    assert copy.read_text(encoding="utf-8") == current  # the row is back, links still from docs/algorithms/
    written = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert written.startswith("# README\n\n<!-- registry: recipes -->\n\n| kind |") and written.endswith(
        f"\n\n{registry_tables.END}\n"
    )
    assert registry_tables.main(["--check"], root=str(tmp_path)) == 0


def test_the_hook_leaves_the_page_as_written_and_warns_when_stale(caplog):
    """The site shows the file: the hook returns the Markdown unchanged, and warns (the strict build fails) on a
    stale block."""
    path = os.path.join(ROOT, "docs", "reference", "losses.md")
    page = types.SimpleNamespace(file=types.SimpleNamespace(abs_src_path=path, src_uri="reference/losses.md"))
    current = _read(path)
    with caplog.at_level(logging.WARNING):
        assert registry_tables.on_page_markdown(current, page, None, None) == current
        assert not caplog.records
        stale = current.replace("| `sapo` |", "| `sapo_typed_by_hand` |", 1)
        assert registry_tables.on_page_markdown(stale, page, None, None) == stale
    assert "reference/losses.md: generated blocks out of date" in caplog.text
    assert caplog.records[0].name.startswith("mkdocs.")  # mkdocs counts it in --strict


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
    site = "\n".join(_site().values())
    for spec in ALGORITHMS.values():
        assert f"::: {spec.config_class.__module__}.{spec.config_class.__name__}" in site, spec.name
        assert f"<!-- registry: settings {spec.name} -->" in site, spec.name
    for name in POLICY_LOSSES:
        assert f"| `{name}` | [`{POLICY_LOSSES[name].__name__}`]" in site, name
    for name in ADVANTAGE_FNS:
        assert f"| `{name}` | `{ADVANTAGE_FNS[name].__module__}." in site, name


def _typed_rows(text: str) -> list[str]:
    """The registered names that start table rows outside the generated blocks of `text`."""
    registered = set(ALGORITHMS) | set(POLICY_LOSSES) | set(ADVANTAGE_FNS)
    generated = False
    typed = []
    for line in text.split("\n"):
        generated = (generated or line.startswith("<!-- registry:")) and line != registry_tables.END
        match = re.match(r"^\| `([\w-]+)`", line)
        if match and match[1] in registered and not generated:
            typed.append(match[1])
    return typed


def test_no_page_types_a_table_of_registered_names():
    """A table whose rows start with registered names is rendered from the registry, never typed: three or more such
    rows outside a page's generated blocks are a hand-typed copy that will drift."""
    for path in [README, *PAGES]:
        typed = _typed_rows(_read(path))
        assert len(typed) < 3, f"{os.path.relpath(path, ROOT)} types a table of registered names: {typed}"
    copy = registry_tables.render("algorithms", "family=grpo")
    assert len(_typed_rows(f"Intro.\n\n{copy}\n")) > 3  # a copied table is found, a generated one is not
    assert not _typed_rows(f"<!-- registry: algorithms family=grpo -->\n\n{copy}\n\n{registry_tables.END}\n")


def test_a_directive_renders_the_registry_and_an_unknown_one_is_refused_by_name():
    table = registry_tables.render("settings", "sapo")
    assert "| `tau_neg` | `1.05` |" in table and "| `tau_pos` | `1.0` |" in table
    verl = registry_tables.render("algorithms", "group=verl")
    assert "`gpg`" in verl and "`sapo`" not in verl
    with pytest.raises(ValueError, match=r"unknown registry directive 'setings' \(did you mean settings\?\)"):
        registry_tables.render("setings", "sapo")


def test_inline_code_breaks_at_its_spaces_only():
    """The inline-code hook marks each short word for the stylesheet's `nowrap`; code blocks and long words are left
    as they were, and the text a reader copies is unchanged."""
    html = "<p><code>--dataset_name</code>, <code>--eval_strategy steps</code></p>"
    html += "<pre><span></span><code>a-b c</code></pre>"
    marked = inline_code.mark_tokens(html)
    assert marked.startswith('<p><code class="md-token">--dataset_name</code>, <code><span class="md-token">--eval')
    assert '<span class="md-token">steps</span></code></p>' in marked
    assert marked.endswith("<pre><span></span><code>a-b c</code></pre>")
    assert re.sub(r"<[^>]+>", "", marked) == re.sub(r"<[^>]+>", "", html)
    long = "x" * (inline_code.LONGEST + 1)
    assert inline_code.mark_tokens(f"<code>{long}</code>") == f"<code>{long}</code>"
    assert ".md-token" in _read(os.path.join(ROOT, "docs", "stylesheets", "extra.css"))
