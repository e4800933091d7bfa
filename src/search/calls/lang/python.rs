//! Python: classes and `self`/`cls`, `import a.b as c` and `from a import b as c`, and
//! receivers typed by an annotation or by `x = Class()`.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&PYTHON];

pub static PYTHON: Lang = Lang {
    name: "python",
    extensions: &["py", "pyi", "pyw"],
    interpreters: &["python", "pypy", "pypy3"],
    grammar: || tree_sitter_python::LANGUAGE.into(),
    tags: &[tree_sitter_python::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["self", "cls"],
        ..Rules::NONE
    },
};

// A call of a capitalized name is taken as a constructor when typing a variable (PEP 8 names
// classes in CapWords); a lowercase one may be any function, so it types nothing.
const QUERY: &str = r#"
(class_definition name: (identifier) @name superclasses: (argument_list [(identifier) @base (attribute attribute: (identifier) @base)])?) @definition.class
(function_definition name: (identifier) @name) @definition.function

(call function: (identifier) @name) @reference.call
(call function: (attribute object: (_) @receiver attribute: (identifier) @name)) @reference.call

(import_statement name: (dotted_name) @import.module) @import
(import_statement name: (aliased_import name: (dotted_name) @import.module alias: (identifier) @import.alias)) @import
(import_from_statement module_name: (_) @import.module name: (dotted_name) @import.name) @import
(import_from_statement module_name: (_) @import.module name: (aliased_import name: (dotted_name) @import.name alias: (identifier) @import.alias)) @import

(assignment left: (identifier) @bind.name right: (call function: [(identifier) @bind.type (attribute attribute: (identifier) @bind.type)]) (#match? @bind.type "^[A-Z]"))
(assignment left: (identifier) @bind.name type: (type) @bind.type)
(typed_parameter (identifier) @bind.name type: (type) @bind.type)
(typed_default_parameter name: (identifier) @bind.name type: (type) @bind.type)
(assignment left: (attribute object: (identifier) attribute: (identifier) @bind.field) right: (call function: [(identifier) @bind.type (attribute attribute: (identifier) @bind.type)]) (#match? @bind.type "^[A-Z]"))
(assignment left: (attribute object: (identifier) attribute: (identifier) @bind.field) type: (type) @bind.type)
(class_definition body: (block (expression_statement (assignment left: (identifier) @bind.field type: (type) @bind.type))))
"#;
