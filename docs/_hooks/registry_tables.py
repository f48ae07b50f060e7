"""The documentation's tables, rendered from trl_ext's registries: nothing in the docs lists names by hand.

A page asks for a table with a directive alone on a line, `<!-- registry: NAME ARG... -->`, and the table is written
into the Markdown itself, between the directive and `<!-- /registry -->`, so a page reads the same on GitHub, in an
editor and on the site:

    python docs/_hooks/registry_tables.py            # writes every generated block: docs/**/*.md and README.md
    python docs/_hooks/registry_tables.py --check    # exit 1, naming the files, if a block is out of date

A new directive is written alone on its line and filled by the first command. The blocks are generated: an edit by
hand inside one is undone by the next run, and until then `tests/docs/test_docs.py` fails. As an MkDocs hook
(`hooks:` in mkdocs.yml) this module inserts nothing: the site shows each page as its file holds it, and the hook
warns (the strict build fails) on a page whose blocks are not current. Relative links in a block start from the
page's own folder (`../algorithms/grpo.md` from `docs/reference/`), so they work on the site and on GitHub; names of
classes are MkDocs autorefs (`[`PPOPolicyLoss`][trl_ext.losses.PPOPolicyLoss]`), links on the site only.

Directives (ARGs are `key=value`):

* `algorithms [family=F] [group=verl|agents|trinity]`: the algorithm table (classes, policy loss, advantage, paper).
* `algorithms-short`: one line per algorithm, for the README.
* `policy-losses [group=...]`, `advantages`, `kl-estimators`, `entropy-terms`, `aggregation-modes`: the component
  registries, each entry with its arguments and defaults.
* `about ALGORITHM`: the record in prose (description, notes, paper, classes).
* `trl-equivalents`: the algorithms whose record names TRL's equivalent settings.
* `settings ALGORITHM`: the algorithm's own config fields (name, default, help).
* `shared-settings FAMILY`: the fields every config of a family adds to its TRL config.
* `configs`, `trainers`: one API block (mkdocstrings `:::`) per algorithm's config / trainer class.
* `recipes`: the packaged YAML recipes and accelerate configs.
* `trl-private-names`: the private names of TRL's trainers that trl_ext touches (the upgrade inventory).
* `verl-losses`: the names `trl_ext.compat.verl.get_policy_loss_fn` takes.
* `modules PACKAGE`: one API block per module of `trl_ext.PACKAGE` (`losses`, `advantages`).
* `async-forms`: each algorithm that generates, with its asynchronous config or why it has none.
* `async-families [path=docs/async_families.json]`: the measurements `benchmarks/async_families.py` wrote (its plot
  and a table, sync against async per algorithm), or a line saying they are absent.

(`python -m trl_ext.trainers.core.generate` is another generator: it writes the built-in algorithms' classes.)
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import importlib
import inspect
import json
import logging
import os
import re
import sys
from collections.abc import Callable

DIRECTIVE = re.compile(r"^<!-- registry: (?P<name>[\w-]+)(?P<args>(?: [^ \n]+)*) -->$", re.MULTILINE)
END = "<!-- /registry -->"
# A directive and its block, when it has one: the lines after it up to `END`, none of them another directive.
BLOCK = re.compile(
    DIRECTIVE.pattern + r"(?P<block>\n(?:(?!<!-- registry: |" + re.escape(END) + r"$).*\n)*" + re.escape(END) + ")?$",
    re.MULTILINE,
)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOG = logging.getLogger("mkdocs.hooks.registry_tables")  # a warning fails the strict build

# The site's page of each trainer family (the algorithm tables link their rows to it).
FAMILY_PAGES = {
    "grpo": "algorithms/grpo.md",
    "mix": "algorithms/mix.md",
    "distill": "algorithms/distillation.md",
    "critic": "algorithms/ppo.md",
    "async": "algorithms/async.md",
    "dpo": "algorithms/dpo.md",
    "sft": "algorithms/sft.md",
    "cpt": "algorithms/sft.md",
}


def family_page(family: str) -> str:
    """The page of a trainer family: `FAMILY_PAGES`, else `algorithms/<family>.md` (a TRL trainer's own family)."""
    return FAMILY_PAGES.get(family, f"algorithms/{family}.md")


def _cell(text: object) -> str:
    """One table cell: on one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _summary(obj: object) -> str:
    """The first line of the docstring of `obj`'s module (`"SAPO: Soft Adaptive Policy Optimization (...)."`)."""
    doc = inspect.getdoc(sys.modules[obj.__module__]) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def _source(obj: object) -> str:
    """`verl` or `trinity`: the reference a component ports, as its module's first line states it."""
    first = _summary(obj)
    return "verl" if "verl `" in first and "Trinity-RFT" not in first else "trinity"


def _arguments(component: type) -> str:
    args = [f"`{a.name}={a.default!r}`" for a in component.arguments]
    return ", ".join(args) or "none"


# ----------------------------------------------------------------------------------------------- algorithms


def _algorithms(group: str | None = None, family: str | None = None) -> list:
    from trl_ext import ALGORITHMS

    out = []
    for spec in _by_family(ALGORITHMS.values()):
        if family is not None and spec.trainer != family:
            continue
        if group == "agents" and not _multi_turn(spec):
            continue
        if group in ("verl", "trinity") and (_multi_turn(spec) or _record_source(spec) != group):
            continue
        out.append(spec)
    return out


def _by_family(specs) -> list:
    """The records in the order of their families' registration (GRPO first), each family's in record order."""
    from trl_ext import FAMILIES

    order = {name: i for i, name in enumerate(FAMILIES)}
    return sorted(specs, key=lambda spec: order.get(spec.trainer, len(order)))


def about(algorithm: str) -> str:
    """An algorithm's record in prose: its description, its notes (`details`), its paper and its classes."""
    from trl_ext import get_algorithm

    spec = get_algorithm(algorithm)
    config, trainer = spec.class_names
    text = f"**{spec.display_name}** (`{spec.name}`): {spec.description}"
    text += f" {spec.details}" if spec.details else ""
    if spec.paper is not None:
        paper = spec.paper
        text += f"\n\nPaper: [{paper.title}](https://arxiv.org/abs/{paper.arxiv}) (arXiv {paper.arxiv}, {paper.year})."
    parts = f"policy loss `{spec.loss_name}`" + (f", advantage `{spec.advantage_fn}`" if spec.advantage_fn else "")
    text += f" Trainer [`{trainer}`][{spec.trainer_class.__module__}.{trainer}], config "
    text += f"[`{config}`][{spec.config_class.__module__}.{config}]; {parts}."
    return text


def trl_equivalents() -> str:
    """The algorithms whose record names TRL's equivalent settings, with that sentence."""
    rows = []
    for spec in _algorithms():
        sentence = next((s for s in re.split(r"(?<=\.) ", spec.details) if "TRL's equivalent" in s), None)
        if sentence:
            rows.append([f"`{spec.name}`", f"`{spec.class_names[1]}`", sentence])
    return _table(["algorithm", "trainer", "TRL's equivalent"], rows)


def _multi_turn(spec) -> bool:
    from trl_ext.advantages import ADVANTAGE_FNS

    return spec.advantage_fn is not None and "run_ids" in ADVANTAGE_FNS[spec.advantage_fn].inputs()


def _paper(spec, link: bool = True) -> str:
    """The paper as `arXiv ID` (a link whose hover text is the title, on the site)."""
    if spec.paper is None:
        return "—"
    text = f"arXiv {spec.paper.arxiv}"
    title = spec.paper.title.replace('"', "'")
    return f'[{text}](https://arxiv.org/abs/{spec.paper.arxiv} "{title}")' if link else text


def _record_source(spec) -> str:
    """Where an algorithm's loss comes from: its policy loss's source, `trl` for a family's own objective."""
    from trl_ext.losses import POLICY_LOSSES

    return "trl" if spec.policy_loss_fn is None else _source(POLICY_LOSSES[spec.policy_loss_fn])


def algorithms(group: str | None = None, family: str | None = None, base: str = "") -> str:
    rows = []
    for spec in _algorithms(group, family):
        config, trainer = spec.class_names
        row = [f"`{spec.name}`", f"`{trainer}`<br>`{config}`"]
        if family is None:
            row.append(f"[{spec.trainer}]({base}{family_page(spec.trainer)})")
        advantage = f"`{spec.advantage_fn}`" if spec.advantage_fn else "—"
        rows.append([*row, f"`{spec.loss_name}`", advantage, spec.description, _paper(spec)])
    header = ["algorithm", "trainer / config", *(["family"] if family is None else []), "policy loss", "advantage"]
    return _table([*header, "what", "paper"], rows)


def algorithms_short() -> str:
    rows = []
    for spec in _algorithms():
        parts = f"`{spec.loss_name}`" + (f" / `{spec.advantage_fn}`" if spec.advantage_fn else "")
        rows.append([f"`{spec.name}`", f"`trl_ext.{spec.class_names[1]}`", parts, _paper(spec, link=False)])
    return _table(["algorithm", "trainer", "policy loss / advantage", "paper"], rows)


# ----------------------------------------------------------------------------------------------- components


def policy_losses(group: str | None = None) -> str:
    from trl_ext.losses import POLICY_LOSSES

    rows = []
    for name, cls in sorted(POLICY_LOSSES.items()):
        if group is not None and _source(cls) != group:
            continue
        metrics = ", ".join(f"`{m}`" for m in cls.metrics) or "—"
        rows.append(
            [f"`{name}`", f"[`{cls.__name__}`][trl_ext.losses.{cls.__name__}]", _summary(cls), _arguments(cls), metrics]
        )
    return _table(["name", "class", "what", "arguments (defaults)", "metrics"], rows)


def advantages() -> str:
    from trl_ext.advantages import ADVANTAGE_FNS

    rows = []
    for name, cls in sorted(ADVANTAGE_FNS.items()):
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        inputs = ", ".join(f"`{i}`" for i in cls.inputs())
        rows.append([f"`{name}`", f"`{cls.__module__}.{cls.__name__}`", doc, inputs, _arguments(cls)])
    return _table(["name", "class", "what", "inputs", "arguments (defaults)"], rows)


def _named_components(registry) -> list:
    """(name, class, aliases) without repeating an alias's class (`kl` = `k1`)."""
    out = []
    for name, cls in registry.items():
        if cls.name != name:
            continue
        aliases = [other for other, c in registry.items() if c is cls and other != name]
        out.append((name, cls, aliases))
    return out


def kl_estimators() -> str:
    from trl_ext.losses import KL_FNS

    rows = []
    for name, cls, aliases in _named_components(KL_FNS):
        rows.append([f"`{name}`", ", ".join(f"`{a}`" for a in aliases) or "—", f"`{cls.__module__}.{cls.__name__}`"])
    return _table(["kl_loss_fn / kl_penalty_fn", "aliases", "class"], rows)


def entropy_terms() -> str:
    from trl_ext.losses import ENTROPY_FNS

    rows = []
    for name, cls, _ in _named_components(ENTROPY_FNS):
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        rows.append([f"`{name}`", doc, _arguments(cls)])
    return _table(["entropy_loss_fn", "what", "arguments (defaults)"], rows)


def aggregation_modes() -> str:
    from trl_ext.losses import LOSS_AGG_MODES
    from trl_ext.losses.aggregation import LOSS_AGG_HELP

    return f"`loss_agg_mode` is one of {', '.join(f'`{m}`' for m in LOSS_AGG_MODES)}. {LOSS_AGG_HELP}"


# ------------------------------------------------------------------------------------------------- settings


def _field_rows(fields) -> list[list[object]]:
    from trl_ext.trainers.core.model_card import field_default

    return [[f"`{f.name}`", f"`{field_default(f)!r}`", f.metadata.get("help", "")] for f in fields]


def settings(algorithm: str) -> str:
    from trl_ext import get_algorithm
    from trl_ext.trainers.core.model_card import algorithm_fields

    spec = get_algorithm(algorithm)
    return _table(["field", "default", "help"], _field_rows(algorithm_fields(spec.config_class, algorithm)))


def shared_settings(family: str) -> str:
    from trl_ext.trainers.core.family_classes import get_family_classes

    base = get_family_classes(family).settings_base
    trl_base = next(c for c in base.__mro__ if c.__module__.startswith("trl."))
    trl_fields = {f.name for f in dataclasses.fields(trl_base)}
    own = [f for f in dataclasses.fields(base) if f.name not in trl_fields]
    return _table(["field", "default", "help"], _field_rows(own))


def _api_blocks(which: int) -> str:
    from trl_ext import ALGORITHMS

    blocks, seen = [], set()
    members = "false" if which == 0 else "[__init__]"
    for spec in _by_family(ALGORITHMS.values()):
        cls = (spec.config_class, spec.trainer_class)[which]
        if cls in seen:
            continue
        seen.add(cls)
        options = f"heading_level: 2\n      show_root_full_path: false\n      members: {members}"
        blocks.append(f"::: {cls.__module__}.{cls.__name__}\n    options:\n      {options}\n")
        if which == 0:  # a config's parameters: their help is stated once, in the specs (not in the class statement)
            blocks.append(settings(spec.name) + "\n")
    return "\n".join(blocks)


def modules(package: str, apart: str = "base") -> str:
    """One API block (`:::`) per module of `trl_ext.<package>` but those rendered apart on the page (`apart`,
    comma-separated module names: `<!-- registry: modules losses apart=base,kl -->`)."""
    import pkgutil

    pkg = importlib.import_module(f"trl_ext.{package}")
    skipped = set(apart.split(","))
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name not in skipped)
    return "\n".join(f"::: trl_ext.{package}.{name}\n    options:\n      heading_level: 3\n" for name in names)


def verl_losses() -> str:
    """`trl_ext.compat.verl`'s registry: each verl loss name and the trl_ext loss behind it."""
    from trl_ext.compat.verl import POLICY_LOSS_REGISTRY

    rows = [[f"`{name}`", f"`{fn.__module__}.{fn.__name__}`"] for name, fn in POLICY_LOSS_REGISTRY.items()]
    return _table(["`get_policy_loss_fn(name)`", "function"], rows)


def recipes() -> str:
    from trl_ext._packaged import accelerate_config_names, recipe_names

    accelerate = accelerate_config_names()
    return _table(
        ["kind", "names (`--config NAME` / `--accelerate_config NAME`)"],
        [
            ["recipes", ", ".join(f"`{n}`" for n in recipe_names())],
            ["accelerate", ", ".join(f"`{n}`" for n in accelerate)],
        ],
    )


def trl_private_names() -> str:
    """The private names of TRL's trainers that trl_ext overrides or reads, with their count and defining class."""
    from trl_ext.trainers.core.trl_private_names import ADAPTER_MODULES, REPLACED_TRL_FUNCTIONS, TRL_PRIVATE_NAMES

    adapters = _table(["adapter module", "for"], [[f"`trl_ext/{m}`", what] for m, what in ADAPTER_MODULES.items()])
    rows = [[f"`{name}`", f"`{owner}`"] for name, owner in TRL_PRIVATE_NAMES.items()]
    for path in REPLACED_TRL_FUNCTIONS:
        module, name = path.rsplit(".", 1)
        rows.append([f"`{name}` (replaced)", f"`{module}`"])
    count = f"{len(TRL_PRIVATE_NAMES)} private names, {len(REPLACED_TRL_FUNCTIONS)} replaced function.\n\n"
    return adapters + "\n\n" + count + _table(["name", "defined by"], rows)


def async_forms() -> str:
    """Each algorithm that generates: its asynchronous config, or why it trains synchronously only for now."""
    from trl_ext.trainers.asynchronous.forms import async_algorithms, async_config_name

    rows = []
    for name, reason in async_algorithms().items():
        trained = f"`{async_config_name(name)}`" if reason is None else f"synchronous only: {reason}"
        rows.append([f"`{name}`", trained])
    forms = sum(reason is None for reason in async_algorithms().values())
    count = f"{forms} of {len(rows)} algorithms that generate train asynchronously.\n\n"
    return count + _table(["algorithm", "asynchronous config (trained by `AsyncGRPOTrainer`)"], rows)


ASYNC_FAMILIES = "docs/async_families.json"
"""Where `benchmarks/async_families.py` writes its measurements (its plot beside it, `.png`), from the root."""


def _number(value: object, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def async_families_table(data: dict, image: str | None = None) -> str:
    """`benchmarks/async_families.py`'s JSON as Markdown: the settings it was measured with, the plot (`image`, a
    link) when given, a row per (scenario, algorithm, run) and the algorithms not run, with their reason."""
    settings = data["settings"]
    commit = (settings.get("commit") or "unknown")[:10]
    threshold = settings["threshold"]
    busy = [run["other_processes_cores"] for by in data["runs"].values() for m in by.values() for run in m.values()]
    text = (
        f"Measured at commit `{commit}` (torch {settings['torch']}, {settings['cpu_count']} CPUs): "
        f"{settings['steps']} optimizer steps, seed {settings['seed']}, asynchronous runs at `max_staleness` "
        f"{settings['max_staleness']}; the machine's other processes used at most "
        f"{_number(max(busy, default=None), 2)} cores meanwhile (0: idle).\n\n"
    )
    if image is not None:
        text += f"![held-out reward against the step and the seconds, each algorithm sync and async]({image})\n\n"
    header = ["scenario", "algorithm", "run", "held-out reward at the end", f"steps to {threshold}"]
    header += [f"seconds to {threshold}", "trained samples / s", "async / sync samples / s", "trained staleness"]
    header += ["generating / training, s per step"]
    rows = []
    for scenario, by_algorithm in data["summary"].items():
        length = settings["scenarios"][scenario]["max_completion_length"]
        for algorithm, modes in by_algorithm.items():
            for mode, s in modes.items():
                sync = modes.get("sync")
                ratio = s["samples_per_s"] / sync["samples_per_s"] if mode != "sync" and sync else None
                generating, training = s.get("median_generate_s"), s.get("median_fwd_bwd_s")
                split = "—" if generating is None or training is None else f"{generating:.2f} / {training:.2f}"
                rows.append([
                    f"{scenario} ({length} tokens)", f"`{algorithm}`", mode, _number(s["final_held_out_reward"], 3),
                    _number(s["steps_to_threshold"], 0), _number(s["seconds_to_threshold"], 1),
                    _number(s["samples_per_s"], 0), _number(ratio, 2), _number(s["mean_staleness"], 2), split,
                ])  # fmt: skip
    text += _table(header, rows)
    refused = {name: record["refused"] for name, record in data["algorithms"].items() if record["refused"]}
    if refused:
        text += "\n\nNot run (no asynchronous form): " + "; ".join(f"`{n}`: {why}" for n, why in refused.items()) + "."
    if data.get("failed"):
        text += "\n\nFailed runs: " + "; ".join(f"{run}: {_cell(why)}" for run, why in data["failed"].items()) + "."
    return text


def async_families(path: str = ASYNC_FAMILIES, base: str = "") -> str:
    """The `async-families` directive: `async_families_table` of the JSON at `path` (from the repository root) with
    its plot (the `.png` beside it, linked from the page's `base`), or a line saying it is absent."""
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        return (
            f"*No measurements yet: `{path}` is absent. `python benchmarks/async_families.py` writes it and its plot.*"
        )
    with open(full, encoding="utf-8") as f:
        data = json.load(f)
    png = os.path.splitext(full)[0] + ".png"
    docs = os.path.join(ROOT, "docs")
    inside = os.path.commonpath([docs, os.path.abspath(png)]) == docs and os.path.isfile(png)
    image = base + os.path.relpath(png, docs).replace(os.sep, "/") if inside else None
    return async_families_table(data, image)


RENDERERS: dict[str, Callable[..., str]] = {
    "async-forms": async_forms,
    "async-families": async_families,
    "algorithms": algorithms,
    "algorithms-short": algorithms_short,
    "policy-losses": policy_losses,
    "advantages": advantages,
    "kl-estimators": kl_estimators,
    "entropy-terms": entropy_terms,
    "aggregation-modes": aggregation_modes,
    "settings": settings,
    "shared-settings": shared_settings,
    "configs": lambda: _api_blocks(0),
    "trainers": lambda: _api_blocks(1),
    "recipes": recipes,
    "modules": modules,
    "verl-losses": verl_losses,
    "about": about,
    "trl-equivalents": trl_equivalents,
    "trl-private-names": trl_private_names,
}


def render(name: str, args: str = "", base: str = "") -> str:
    """The table (Markdown) a directive asks for; an unknown directive is a ValueError naming the known ones."""
    if name not in RENDERERS:
        close = difflib.get_close_matches(name, RENDERERS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"unknown registry directive {name!r}{hint}; known: {', '.join(RENDERERS)}")
    positional = [a for a in args.split() if "=" not in a]
    keywords = dict(a.split("=", 1) for a in args.split() if "=" in a)
    if name in ("algorithms", "async-families"):
        keywords["base"] = base
    return RENDERERS[name](*positional, **keywords)


def refresh_blocks(markdown: str, base: str = "") -> str:
    """`markdown` with each directive's block (between it and `END`) written anew, a directive without one given one;
    `base` leads from the file's folder to `docs/` (`../` from `docs/algorithms/`, `docs/` from the root)."""

    def block(match: re.Match) -> str:
        return f"{match[0].splitlines()[0]}\n\n{render(match['name'], match['args'].strip(), base)}\n\n{END}"

    return BLOCK.sub(block, markdown)


def base_for(path: str, root: str = ROOT) -> str:
    """The relative path from the folder of `path` (a page or the README) to `docs/`, for the links a block makes."""
    base = os.path.relpath(os.path.join(root, "docs"), os.path.dirname(os.path.abspath(path))).replace(os.sep, "/")
    return "" if base == "." else base + "/"


def documents(root: str = ROOT) -> list[str]:
    """The files whose blocks this module writes: the README and every page under `docs/`."""
    pages = glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
    return [os.path.join(root, "README.md"), *sorted(pages)]


def on_page_markdown(markdown: str, page, config, files) -> str:  # the MkDocs hook: checks, changes nothing
    path = page.file.abs_src_path
    if refresh_blocks(markdown, base_for(path)) != markdown:
        LOG.warning(f"{page.file.src_uri}: generated blocks out of date; run python docs/_hooks/registry_tables.py")
    return markdown


def main(argv: list[str], root: str = ROOT) -> int:
    check = "--check" in argv
    stale = []
    for path in documents(root):
        with open(path, encoding="utf-8") as f:
            current = f.read()
        fresh = refresh_blocks(current, base_for(path, root))
        if fresh == current:
            continue
        stale.append(os.path.relpath(path, root))
        if not check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(fresh)
    if check and stale:
        print("Generated blocks out of date in " + ", ".join(stale) + ": run python docs/_hooks/registry_tables.py")
        return 1
    print(("Rewrote " + ", ".join(stale)) if stale and not check else "Every generated block is current.")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    importlib.import_module("trl_ext")
    raise SystemExit(main(sys.argv[1:]))
