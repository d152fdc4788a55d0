"""Sphinx settings of the API pages (``make docs``; sources laid out by ``prepare.py``)."""

from __future__ import annotations

import importlib
import re
from typing import Any

from docutils import nodes

import tfdevices

project = "tfdevices"
release = version = tfdevices.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_nb"]
exclude_patterns = ["**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".ipynb": "myst-nb"}
html_theme = "alabaster"
html_title = f"tfdevices {release}"

# Google-style docstrings (Args/Returns/Raises), the house style
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}

# Notebooks: the outputs make test left (prepare.py --executed) are shown as they are; a notebook without
# outputs is executed here, in a fresh kernel of this Python; a failing cell fails the build.
nb_execution_mode = "auto"
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# Every cross-reference to tfdevices must resolve: a broken one fails the build. Other libraries' types are
# not linked (no network while building), nor private helpers' (not documented).
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(collections\.abc|typing|types|os|argparse|socket|subprocess|threading|absl|tensorboard|keras|tensorflow|numpy|dataclasses)(\..*)?",
    ),
    (r"py:.*", r".*\b_\w+"),  # private names (_Prepared, _R)
    (r"py:data", r"[A-Z][A-Z0-9_]*"),  # module constants: documented where they have a docstring
]
# a type annotation `bytes` in a module whose records have a field named bytes: Sphinx offers both
suppress_warnings = ["ref.python"]

_RETURNS = re.compile(r"^(\s*)Returns:\s*$")


def _returns_as_text(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """The house docstrings say what comes back in words ("The plan: ..."), not ``type: description``.

    Napoleon would read the words before a first colon as a type; this hands it the section as
    ``:returns:`` text instead.
    """
    for i, line in enumerate(lines):
        match = _RETURNS.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        body = [text.strip() for text in lines[i + 1 : end] if text.strip()]
        lines[i:end] = [" " * indent + ":returns: " + " ".join(body), ""]
        return


_PROSE = re.compile(r"\w \w")  # "The name a spec uses", not "int | None" or "tuple[str, ...]"


def _attribute_words(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """An attribute's docstring that starts "The name a spec uses: ...": napoleon took the words before the
    colon for a type; they go back in front of the text."""
    if what not in {"attribute", "data", "property"}:
        return
    for i, line in enumerate(lines):
        words = line.removeprefix(":type: ").strip()
        if line.startswith(":type: ") and _PROSE.search(words):
            del lines[i]
            first = next(j for j, text in enumerate(lines) if text.strip())
            lines[first] = f"{words}: {lines[first].lstrip()}"
            return


def _tfdevices_names(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """``tfdevices.build_strategy``, ``PlacementReport``: a name as users write it, resolved to where it is defined."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    domain = env.get_domain("py")
    candidates = []
    if target.startswith("tfdevices."):
        module, _, attr = target.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), attr)
            candidates.append(f"{obj.__module__}.{obj.__qualname__}")
        except (ImportError, AttributeError):
            pass
    short = target.rpartition(".")[2]
    candidates += sorted(name for name in domain.objects if name.endswith(("." + target, "." + short)))
    for full in dict.fromkeys(candidates):
        if full in domain.objects:
            docname, node_id, _ = domain.objects[full][:3]
            ref = nodes.reference(
                "",
                "",
                internal=True,
                refuri=app.builder.get_relative_uri(node["refdoc"], docname) + "#" + node_id,
                reftitle=full,
            )
            ref.append(contnode)
            return ref
    return None


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _returns_as_text, priority=100)  # before napoleon (500)
    app.connect("autodoc-process-docstring", _attribute_words, priority=600)  # after napoleon (500)
    app.connect("missing-reference", _tfdevices_names)
