"""Sphinx settings of the documentation site (``make docs``; sources laid out by ``prepare.py``)."""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

from docutils import nodes

import tfdevices

project = "tfdevices"
copyright = "the tfdevices authors, Apache-2.0"
release = version = tfdevices.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_nb", "sphinx_copybutton"]
exclude_patterns = ["**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".ipynb": "myst-nb"}
html_theme = "furo"
html_title = f"tfdevices {release}"
html_static_path = ["_static"]
html_css_files = ["tfdevices.css"]
# a literal block (``::``) is text: a layout or a diagram, not Python; code says its language (code-block:: python)
highlight_language = "none"

# A copy button on every code block. It copies what runs when pasted: a console block's commands without their
# "$ " prompt and without its output lines (a command a "\\" continues keeps its next line); a docstring
# example's code without ">>> " and "... ". tests/test_readme.py runs what it copies.
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
copybutton_line_continuation_character = "\\"

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

# Every cross-reference to tfdevices must name something that exists: a broken one fails the build. A public
# name links to its stage's page, by whatever path the code wrote it (_tfdevices_names); an internal one is
# shown as text (the reference documents the public names only). Other libraries' types are not linked (no
# network while building), nor private helpers' (not documented).
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(collections\.abc|typing|types|os|argparse|socket|subprocess|threading|absl|tensorboard|keras|tf_keras|tensorflow|tf|numpy|dataclasses)(\..*)?",
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


def _public_names() -> dict[int, str]:
    """id(object) -> the public name it is documented under (``tfdevices.gpus.Inventory``)."""
    out: dict[int, str] = {}
    for module in tfdevices.PUBLIC_MODULES:
        mod = importlib.import_module(module)
        out[id(mod)] = module
        for name in mod.__all__:
            out.setdefault(id(getattr(mod, name)), f"{module}.{name}")
    return out


PUBLIC = _public_names()


def _find(target: str) -> Any:
    """The module, or object of a module, that a dotted name names; None when none."""
    try:
        return importlib.import_module(target)
    except ImportError:
        pass
    module, _, attr = target.rpartition(".")
    while module:
        try:
            obj: Any = importlib.import_module(module)
            break
        except ImportError:
            module, _, head = module.rpartition(".")
            attr = f"{head}.{attr}"
    else:
        return None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _tfdevices_names(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """A name as the code writes it (``tfdevices.gpus.inventory.Inventory``, ``PlacementReport``), resolved to its
    public name's page; a name of an internal module (not documented) is left as text; a name that names
    nothing stays unresolved, and fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    domain = env.get_domain("py")
    candidates = []
    if target.startswith("tfdevices."):
        obj = _find(target)
        if obj is None:
            return None
        if id(obj) not in PUBLIC:
            owner, _, member = target.rpartition(".")
            if id(_find(owner)) in PUBLIC:  # a method or attribute of a public class
                candidates.append(f"{PUBLIC[id(_find(owner))]}.{member}")
            else:
                return contnode  # internal: not documented, shown as text
        else:
            candidates.append(PUBLIC[id(obj)])
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
    if target.startswith("tfdevices."):
        return contnode
    # a short name in a docstring (``:func:`peak_for```): an internal name of the package is shown as text
    head = target.split(".")[0]
    modules = [m for name, m in sorted(sys.modules.items()) if name.startswith("tfdevices.") and m is not None]
    return contnode if any(hasattr(m, head) for m in modules) else None


# A class whose base is picked when an instance is made: its bases as they are then (PlacementLogger's __new__
# makes a subclass of the chosen Keras' Callback).
BASES_AT_RUN_TIME = {
    "tfdevices.tensorboard.PlacementLogger": [
        ":py:class:`keras.callbacks.Callback` (Keras 3; ``tf_keras.callbacks.Callback`` with ``framework='tf_keras'``)"
    ],
}


def _public_bases(app: Any, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """``Bases: InputError`` by its public name (``tfdevices.errors.InputError``), not where it is defined."""
    if PUBLIC.get(id(obj)) in BASES_AT_RUN_TIME:
        bases[:] = BASES_AT_RUN_TIME[PUBLIC[id(obj)]]
        return
    for i, base in enumerate(bases):
        if id(base) in PUBLIC:
            bases[i] = f":py:class:`{PUBLIC[id(base)]}`"


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _returns_as_text, priority=100)  # before napoleon (500)
    app.connect("autodoc-process-docstring", _attribute_words, priority=600)  # after napoleon (500)
    app.connect("missing-reference", _tfdevices_names)
    app.connect("autodoc-process-bases", _public_bases)
