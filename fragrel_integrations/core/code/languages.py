"""Per-language tree-sitter grammars and queries: definitions, call sites and imports.

Each language has one tree-sitter query with these captures:

- ``@function`` / ``@class`` on a definition node, ``@function.name`` / ``@class.name`` on its name;
- ``@call`` on a call expression, ``@call.name`` on the called name, ``@call.receiver`` on the object of a
  method call (``obj`` in ``obj.f()``); ``@new`` / ``@new.name`` / ``@new.receiver`` for constructor calls;
- ``@import`` on an import statement (read by a small per-language function into :class:`ImportRecord`);
- ``@package`` on a package declaration (Java, Go).

Grammars come from the per-language wheels (``tree-sitter-python``, ``tree-sitter-javascript``,
``tree-sitter-typescript``, ``tree-sitter-java``, ``tree-sitter-go``), imported lazily behind the ``[code]`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, NamedTuple

from ..._optional import require

__all__ = ["SPECS", "ImportRecord", "LanguageSpec", "get_language", "get_parser", "get_query"]


class ImportRecord(NamedTuple):
    """One imported binding. ``module`` as written; ``name`` the imported member (None: the module itself);
    ``alias`` the local name it binds (None: Python's ``import a.b`` binds ``a``); ``star``: ``from m import *``."""

    module: str
    name: str | None = None
    alias: str | None = None
    star: bool = False


def _text(node: Any) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def _string_content(node: Any) -> str:
    return _text(node).strip().strip("'\"`")


# --------------------------------------------------------------------------------------------- imports


def _python_imports(node: Any) -> list[ImportRecord]:
    plain = node.type == "import_statement"  # import a.b [as c]; else from m import x [as y], or *
    module = "" if plain else _text(node.child_by_field_name("module_name"))
    if not plain and any(c.type == "wildcard_import" for c in node.children):
        return [ImportRecord(module, None, None, True)]
    out = []
    for child in node.children_by_field_name("name"):
        aliased = child.type == "aliased_import"
        name = _text(child.child_by_field_name("name") if aliased else child)
        alias = _text(child.child_by_field_name("alias")) if aliased else (None if plain else name)
        out.append(ImportRecord(name, None, alias) if plain else ImportRecord(module, name, alias))
    return out


def _js_imports(node: Any) -> list[ImportRecord]:
    if node.type == "variable_declarator":  # const x = require('m') / const {a, b: c} = require('m')
        value = node.child_by_field_name("value")
        if value is None or _text(value.child_by_field_name("function")) != "require":
            return []
        args = [c for c in value.child_by_field_name("arguments").named_children if c.type == "string"]
        if not args:
            return []
        module = _string_content(args[0])
        binding = node.child_by_field_name("name")
        if binding.type == "identifier":
            return [ImportRecord(module, None, _text(binding))]
        out = []
        for child in binding.named_children:
            if child.type == "shorthand_property_identifier_pattern":
                out.append(ImportRecord(module, _text(child), _text(child)))
            elif child.type == "pair_pattern":
                key, value = child.child_by_field_name("key"), child.child_by_field_name("value")
                out.append(ImportRecord(module, _text(key), _text(value)))
        return out
    source = node.child_by_field_name("source")
    if source is None:
        return []
    module = _string_content(source)
    out = []
    for clause in (c for c in node.named_children if c.type == "import_clause"):
        for child in clause.named_children:
            if child.type == "identifier":
                out.append(ImportRecord(module, "default", _text(child)))
            elif child.type == "namespace_import":  # import * as ns
                ids = [c for c in child.named_children if c.type == "identifier"]
                out += [ImportRecord(module, None, _text(ids[0]))] if ids else []
            elif child.type == "named_imports":
                for spec in (c for c in child.named_children if c.type == "import_specifier"):
                    name = _text(spec.child_by_field_name("name"))
                    alias = spec.child_by_field_name("alias")
                    out.append(ImportRecord(module, name, _text(alias) if alias is not None else name))
    return out


def _java_imports(node: Any) -> list[ImportRecord]:
    target = next((c for c in node.named_children if c.type in ("scoped_identifier", "identifier")), None)
    if target is None:
        return []
    dotted = _text(target)
    if any(c.type == "asterisk" for c in node.named_children):
        return [ImportRecord(dotted, None, None, True)]
    module, _, name = dotted.rpartition(".")
    return [ImportRecord(module, name, name)]


def _go_imports(node: Any) -> list[ImportRecord]:
    path = _string_content(node.child_by_field_name("path"))
    name = node.child_by_field_name("name")
    alias = _text(name) if name is not None else path.rstrip("/").rsplit("/", 1)[-1]
    if alias in ("_", "."):
        return [ImportRecord(path, None, None, alias == ".")]
    return [ImportRecord(path, None, alias)]


# --------------------------------------------------------------------------------------------- queries

_PYTHON_QUERY = """
(function_definition name: (identifier) @function.name) @function
(class_definition name: (identifier) @class.name) @class
(call function: (identifier) @call.name) @call
(call function: (attribute object: (_) @call.receiver attribute: (identifier) @call.name)) @call
(import_statement) @import
(import_from_statement) @import
"""

_JS_COMMON = """
(function_declaration name: (identifier) @function.name) @function
(generator_function_declaration name: (identifier) @function.name) @function
(method_definition name: (property_identifier) @function.name) @function
(variable_declarator name: (identifier) @function.name value: [(arrow_function) (function_expression)]) @function
(call_expression function: (identifier) @call.name) @call
(call_expression
  function: (member_expression object: (_) @call.receiver property: (property_identifier) @call.name)) @call
(new_expression constructor: (identifier) @new.name) @new
(new_expression
  constructor: (member_expression object: (_) @new.receiver property: (property_identifier) @new.name)) @new
(import_statement) @import
(variable_declarator value: (call_expression function: (identifier) arguments: (arguments (string)))) @import
"""

_JS_QUERY = _JS_COMMON + "(class_declaration name: (identifier) @class.name) @class\n"

_TS_QUERY = f"""{_JS_COMMON}
(class_declaration name: (type_identifier) @class.name) @class
(abstract_class_declaration name: (type_identifier) @class.name) @class
"""

_JAVA_QUERY = """
(method_declaration name: (identifier) @function.name) @function
(constructor_declaration name: (identifier) @function.name) @function
(class_declaration name: (identifier) @class.name) @class
(interface_declaration name: (identifier) @class.name) @class
(enum_declaration name: (identifier) @class.name) @class
(record_declaration name: (identifier) @class.name) @class
(method_invocation object: (_)? @call.receiver name: (identifier) @call.name) @call
(object_creation_expression type: (type_identifier) @new.name) @new
(import_declaration) @import
(package_declaration) @package
"""

_GO_QUERY = """
(function_declaration name: (identifier) @function.name) @function
(method_declaration name: (field_identifier) @function.name) @function
(type_spec name: (type_identifier) @class.name) @class
(call_expression function: (identifier) @call.name) @call
(call_expression function: (selector_expression operand: (_) @call.receiver field: (field_identifier) @call.name)) @call
(import_spec) @import
(package_clause) @package
"""


@dataclass(frozen=True)
class LanguageSpec:
    """How one language is parsed and read.

    ``class_kinds`` open a class scope (methods defined inside belong to it); ``function_kinds`` open a function
    scope (definitions inside are not top-level); ``self_names`` are receivers that mean "this class".
    """

    grammar_module: str
    query: str
    read_imports: Callable[[Any], list[ImportRecord]]
    class_kinds: frozenset[str]
    function_kinds: frozenset[str]
    self_names: frozenset[str] = frozenset({"this"})
    comment_prefix: str = "//"
    grammar_function: str = "language"


_PY_CLASSES = frozenset({"class_definition"})
_PY_FUNCTIONS = frozenset({"function_definition", "lambda"})
_JS_FUNCTIONS = frozenset(
    {"function_declaration", "generator_function_declaration", "method_definition", "arrow_function"}
    | {"function_expression", "generator_function"}
)
_JS_CLASSES = frozenset({"class_declaration", "class"})
_TS_CLASSES = _JS_CLASSES | {"abstract_class_declaration"}
_JAVA_CLASSES = frozenset({"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"})
_JAVA_FUNCTIONS = frozenset({"method_declaration", "constructor_declaration", "lambda_expression"})
_GO_FUNCTIONS = frozenset({"function_declaration", "method_declaration", "func_literal"})
_JAVA_SELF = frozenset({"this", "super"})
_PY_SELF = frozenset({"self", "cls"})
# TypeScript and TSX: one grammar wheel with two grammars
_TYPESCRIPT = LanguageSpec("tree_sitter_typescript", _TS_QUERY, _js_imports, _TS_CLASSES, _JS_FUNCTIONS)

SPECS: dict[str, LanguageSpec] = {
    "python": LanguageSpec(
        "tree_sitter_python", _PYTHON_QUERY, _python_imports, _PY_CLASSES, _PY_FUNCTIONS, _PY_SELF, "#"
    ),
    "javascript": LanguageSpec("tree_sitter_javascript", _JS_QUERY, _js_imports, _JS_CLASSES, _JS_FUNCTIONS),
    "typescript": replace(_TYPESCRIPT, grammar_function="language_typescript"),
    "tsx": replace(_TYPESCRIPT, grammar_function="language_tsx"),
    "java": LanguageSpec("tree_sitter_java", _JAVA_QUERY, _java_imports, _JAVA_CLASSES, _JAVA_FUNCTIONS, _JAVA_SELF),
    "go": LanguageSpec("tree_sitter_go", _GO_QUERY, _go_imports, frozenset(), _GO_FUNCTIONS, frozenset()),
}


def package_name(node: Any) -> str:
    """The dotted package a ``@package`` node declares (Java ``package a.b;``, Go ``package p``)."""
    kinds = ("scoped_identifier", "identifier", "package_identifier")
    return _text(next((c for c in node.named_children if c.type in kinds), None))


def _spec(language: str) -> LanguageSpec:
    try:
        return SPECS[language]
    except KeyError:
        raise ValueError(f"unsupported language {language!r}; choose from {sorted(SPECS)}") from None


@cache
def get_language(language: str) -> Any:
    """The tree-sitter ``Language`` for ``language`` (needs the ``[code]`` extra)."""
    spec = _spec(language)
    ts = require("tree_sitter", "code")
    grammar = require(spec.grammar_module, "code")
    return ts.Language(getattr(grammar, spec.grammar_function)())


def get_parser(language: str) -> Any:
    """A fresh tree-sitter ``Parser`` (parsers are not shared: they are not thread-safe)."""
    ts = require("tree_sitter", "code")
    return ts.Parser(get_language(language))


@cache
def get_query(language: str) -> Any:
    """The compiled definitions/calls/imports query of ``language``."""
    ts = require("tree_sitter", "code")
    return ts.Query(get_language(language), _spec(language).query)
