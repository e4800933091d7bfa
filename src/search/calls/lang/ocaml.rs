//! OCaml: modules (`module Repo = struct .. end`, functors too) outlined as the structures
//! OCaml calls them, their functions their methods; module types (`module type S = sig ..
//! end`, an interface whose `val`s are declarations); classes and their methods (`obj#m`);
//! `let` functions, local ones, and `fun` bound to a name; `Repo.f`, `A.B.f`, `x |> f`,
//! `f @@ x`. `module S = Store` is an import of the file `store.ml` (a file is the module of
//! its capitalized name), and `module T = Twice (Repo)` names the functor's structure; `open
//! Store` brings in every name without naming one: it is not recorded. A receiver is typed by
//! an annotation (`(c : counter)`, `let g : counter = ..`), `new counter`, the class's self
//! name, and a module by its module type (a functor's `(M : SAVER)`, a first-class `(module M
//! : SAVER)`). A module matches a module type by its shape, never by saying so: a call through
//! one (`M.save`) may reach every `save`, and says so. A `let` that takes no parameters binds
//! a value, no function: the calls in it are its enclosing function's. An interface file
//! (`.mli`) is outlined by its declarations.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&OCAML, &OCAML_INTERFACE];

pub static OCAML: Lang = Lang {
    name: "ocaml",
    extensions: &["ml"],
    interpreters: &["ocaml"],
    grammar: || tree_sitter_ocaml::LANGUAGE_OCAML.into(),
    // The shipped tags query names every `let` a function (values too) and tags no method.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        // The self name is the class's choice (`object (self)`): a pattern binds it.
        self_names: &[],
        // A bare call in a module's function reaches the module's own function first.
        implicit_self: true,
        capitalized_file_modules: true,
        ..Rules::NONE
    },
};

/// An interface file (`.mli`), in the grammar's interface dialect: declarations only, outlined
/// as the implementation is (a definition in the `.ml` hides its declaration from `callers`).
pub static OCAML_INTERFACE: Lang = Lang {
    name: "ocaml_interface",
    extensions: &["mli"],
    interpreters: &[],
    grammar: || tree_sitter_ocaml::LANGUAGE_OCAML_INTERFACE.into(),
    query: &[INTERFACE_QUERY],
    ..OCAML
};

const INTERFACE_QUERY: &str = r#"
(module_type_definition (module_type_name) @name body: (signature)) @definition.interface
(module_definition (module_binding (module_name) @name module_type: (signature))) @definition.struct
(class_definition (class_binding (class_name) @name)) @definition.class
(value_specification (value_name) @name) @definition.function @declaration
(method_specification (method_name) @name) @definition.method @declaration
(external (value_name) @name) @definition.function @declaration
"#;

const QUERY: &str = r#"
(module_type_definition (module_type_name) @name body: (signature)) @definition.interface
(signature (value_specification (value_name) @name) @definition.method @declaration)
(module_definition (module_binding (module_name) @name body: (structure))) @definition.struct
(class_definition (class_binding (class_name) @name body: (object_expression (inheritance_definition class: (class_path (class_name) @base))?))) @definition.class
(method_definition (method_name) @name) @definition.method
(let_binding pattern: (value_name) @name (parameter)) @definition.function
(let_binding pattern: (value_name) @name body: [(fun_expression) (function_expression)]) @definition.function
(external (value_name) @name) @definition.function @declaration

(application_expression function: (value_path . (value_name) @name .)) @reference.call
(application_expression function: (value_path (module_path) @qualifier (value_name) @name)) @reference.call
(method_invocation object: (_) @receiver method: (method_name) @name) @reference.call
(infix_expression operator: (_) @op right: (value_path . (value_name) @name .) @reference.call (#eq? @op "|>"))
(infix_expression operator: (_) @op right: (value_path (module_path) @qualifier (value_name) @name) @reference.call (#eq? @op "|>"))
(infix_expression left: (value_path . (value_name) @name .) @reference.call operator: (_) @op (#eq? @op "@@"))
(infix_expression left: (value_path (module_path) @qualifier (value_name) @name) @reference.call operator: (_) @op (#eq? @op "@@"))
(new_expression (class_path (class_name) @name)) @reference.new

(module_definition (module_binding (module_name) @import.alias body: (module_path) @import.module)) @import
(module_definition (module_binding (module_name) @import.alias body: (module_application functor: (module_path) @import.module))) @import

(typed_pattern pattern: (value_pattern) @bind.name type: (type_constructor_path (type_constructor) @bind.type))
(let_binding pattern: (value_name) @bind.name type: (type_constructor_path (type_constructor) @bind.type))
(let_binding pattern: (value_name) @bind.name body: (new_expression (class_path (class_name) @bind.type)))
(package_pattern (module_name) @bind.name module_type: (module_type_path (module_type_name) @bind.type))
(module_parameter (module_name) @bind.name module_type: (module_type_path (module_type_name) @bind.type))
(class_binding (class_name) @bind.type body: (object_expression self: (value_pattern) @bind.name))
"#;
