//! Julia: modules, structs and abstract types (an abstract type is the interface its
//! subtypes, `struct Repo <: Saver`, implement), functions in both forms (`function f(x) ..
//! end`, `f(x) = ..`), macros, and anonymous functions bound to a name (`inner = x -> ..`).
//! Julia dispatches a call on its arguments' types: each method is its own definition, owned
//! by its first argument's type (`save(r::Repo, item)` is `Repo.save`, `Base.length(r::Repo)`
//! is `Repo.length`), and a call's first argument chooses among them when the file says its
//! type (`r::Repo`, `r = Repo(..)`, a struct's typed field): a call on a `Saver` may reach
//! every subtype's. A call on an argument of unknown type is a bare call among all the
//! methods, ambiguous too when one is added to another module's function (`length(x)` may be
//! Base's); one on a type none of the methods is for, when each is for a type, reaches none
//! (`checkout(1)` with only `checkout(s::Saver)`). `import Base: length` before `length(r::
//! Repo) = ..` extends Base's too, which gm does not see: it reads as the module's own. `x |>
//! f` dispatches on `x`. `using .Store: f as g`, `import .Store` with `Store.f(x)`; a module is
//! found by the module a file declares or the file's name. `include("store.jl")` pastes a file
//! in: not recorded.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&JULIA];

pub static JULIA: Lang = Lang {
    name: "julia",
    extensions: &["jl"],
    interpreters: &["julia"],
    grammar: || tree_sitter_julia::LANGUAGE.into(),
    // The crate ships no tags query.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        dispatch: true,
        ..Rules::NONE
    },
};

// A function's name and first parameter, in `function f(..)`, `function f(..) where T`,
// `f(..)::T = ..` and `f(..) = ..`, are found by the same few shapes, each in both forms; a
// method added to another module's function (`Base.show(io, r::Repo)`) is named `show`. A
// first parameter of a type variable (`f(x::T) where T`, named by a capital and digits, as
// Julia code names them) is no type's: the method is a function.
const QUERY: &str = r#"
(module_definition name: (identifier) @name) @definition.module
(module_definition name: (identifier) @module)
(abstract_definition (type_head [(identifier) @name (binary_expression . (identifier) @name (operator) (identifier) @base)])) @definition.interface
(struct_definition (type_head [(identifier) @name (parametrized_type_expression . (identifier) @name) (binary_expression . [(identifier) @name (parametrized_type_expression . (identifier) @name)] (operator) (identifier) @base)])) @definition.struct
(function_definition (signature [(call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends]) (where_expression (call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends])) (typed_expression (call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends]))])) @definition.function
(function_definition (signature [(call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends] (argument_list . (typed_expression . (identifier) . [(identifier) @owner (parametrized_type_expression . (identifier) @owner)]))) (where_expression (call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends] (argument_list . (typed_expression . (identifier) . [(identifier) @owner (parametrized_type_expression . (identifier) @owner)]))))]) (#not-match? @owner "^[A-Z][0-9]*$")) @definition.function
(assignment . [(call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends]) (where_expression (call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends])) (typed_expression (call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends]))] (operator) @eq (#eq? @eq "=")) @definition.function
(assignment . [(call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends] (argument_list . (typed_expression . (identifier) . [(identifier) @owner (parametrized_type_expression . (identifier) @owner)]))) (where_expression (call_expression . [(identifier) @name (field_expression (identifier) @name .) @extends] (argument_list . (typed_expression . (identifier) . [(identifier) @owner (parametrized_type_expression . (identifier) @owner)]))))] (operator) @eq (#eq? @eq "=") (#not-match? @owner "^[A-Z][0-9]*$")) @definition.function
(assignment . (identifier) @name (operator) @eq . (arrow_function_expression) (#eq? @eq "=")) @definition.function
(macro_definition (signature (call_expression . (identifier) @name))) @definition.macro

(call_expression . (identifier) @name (argument_list . [(identifier) (field_expression)] @dispatch)?) @reference.call
(broadcast_call_expression . (identifier) @name (argument_list . [(identifier) (field_expression)] @dispatch)?) @reference.call
(call_expression . (field_expression (_) @qualifier . (identifier) @name .)) @reference.call
(binary_expression . [(identifier) (field_expression)]? @dispatch . (operator) @op . (identifier) @name . (#eq? @op "|>")) @reference.call
(macrocall_expression (macro_identifier (identifier) @name)) @reference.macro

(import_statement (import_path (identifier) @import.module)) @import
(using_statement (import_path (identifier) @import.module)) @import
(selected_import (import_path (identifier) @import.module) (identifier) @import.name) @import
(selected_import (import_path (identifier) @import.module) (import_alias . (identifier) @import.name . (identifier) @import.alias)) @import

(typed_expression . (identifier) @bind.name . [(identifier) @bind.type (parametrized_type_expression . (identifier) @bind.type)])
(struct_definition (typed_expression . (identifier) @bind.field . [(identifier) @bind.type (parametrized_type_expression . (identifier) @bind.type)]))
(assignment . (identifier) @bind.name . (operator) . (call_expression . (identifier) @bind.type) (#match? @bind.type "^[A-Z]"))
"#;
