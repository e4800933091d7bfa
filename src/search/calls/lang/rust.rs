//! Rust: `impl` blocks and traits give methods their type, `self`/`Self`, paths (`Type::f`,
//! `module::f`), `use a::b as c`, and macros (`name!(...)`), which are calls gm cannot resolve,
//! as are the call-like tokens in their arguments (`assert_eq!(f(x), 1)`: `f` is counted).

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&RUST];

pub static RUST: Lang = Lang {
    name: "rust",
    extensions: &["rs"],
    interpreters: &[],
    grammar: || tree_sitter_rust::LANGUAGE.into(),
    tags: &[tree_sitter_rust::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["self", "Self"],
        ..Rules::NONE
    },
};

// `let x = Type::f(..)` types `x` as `Type`: most such calls are constructors (`new`, `open`,
// `from`, `default`), and a wrong guess only costs precision (see `resolve.rs`).
const QUERY: &str = r#"
(struct_item name: (type_identifier) @name) @definition.struct
(enum_item name: (type_identifier) @name) @definition.enum
(union_item name: (type_identifier) @name) @definition.struct
(trait_item name: (type_identifier) @name (trait_bounds [(type_identifier) @base (generic_type type: (type_identifier) @base) (scoped_type_identifier name: (type_identifier) @base)])?) @definition.trait
(type_item name: (type_identifier) @name) @definition.type
(const_item name: (identifier) @name) @definition.constant
(static_item name: (identifier) @name) @definition.constant
(mod_item name: (identifier) @name body: (_)) @definition.module
(macro_definition name: (identifier) @name) @definition.macro
(function_item name: (identifier) @name) @definition.function
(function_signature_item name: (identifier) @name) @definition.function
(impl_item trait: [(type_identifier) @base (generic_type type: (type_identifier) @base) (scoped_type_identifier name: (type_identifier) @base)]? type: [(type_identifier) @name (generic_type type: (type_identifier) @name) (scoped_type_identifier name: (type_identifier) @name)]) @definition.impl

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression value: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression function: (scoped_identifier path: (_) @qualifier name: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (field_expression value: (_) @receiver field: (field_identifier) @name))) @reference.call
(call_expression function: (generic_function function: (scoped_identifier path: (_) @qualifier name: (identifier) @name))) @reference.call
(macro_invocation macro: [(identifier) @name (scoped_identifier path: (_) @qualifier name: (identifier) @name)]) @reference.macro
(token_tree (identifier) @name @reference.in_macro . (token_tree) @arguments (#match? @arguments "^\\("))

(use_declaration argument: (scoped_identifier path: (_) @import.module name: (identifier) @import.name)) @import
(use_declaration argument: (use_as_clause path: (scoped_identifier path: (_) @import.module name: (identifier) @import.name) alias: (identifier) @import.alias)) @import
(use_declaration argument: (use_as_clause path: (identifier) @import.module alias: (identifier) @import.alias)) @import
(scoped_use_list path: (_) @import.module list: (use_list (identifier) @import.name)) @import
(scoped_use_list path: (_) @import.module list: (use_list (use_as_clause path: (identifier) @import.name alias: (identifier) @import.alias))) @import
(scoped_use_list path: (_) @import.module list: (use_list (use_as_clause path: (scoped_identifier path: (_) @import.module name: (identifier) @import.name) alias: (identifier) @import.alias))) @import
(scoped_use_list path: (_) @import.module list: (use_list (scoped_identifier path: (_) @import.module name: (identifier) @import.name))) @import

(let_declaration pattern: (identifier) @bind.name type: (_) @bind.type)
(let_declaration pattern: (identifier) @bind.name value: (call_expression function: (scoped_identifier path: (identifier) @bind.type)) (#match? @bind.type "^[A-Z]"))
(let_declaration pattern: (identifier) @bind.name value: (try_expression (call_expression function: (scoped_identifier path: (identifier) @bind.type))) (#match? @bind.type "^[A-Z]"))
(let_declaration pattern: (identifier) @bind.name value: (struct_expression name: (type_identifier) @bind.type))
(parameter pattern: (identifier) @bind.name type: (_) @bind.type)
(field_declaration name: (field_identifier) @bind.field type: (_) @bind.type)
"#;
